"""Alternating rounds: order, pairing of ratios, the median run, and the idle peer's CPU."""

import os
import subprocess
import sys

from bench.measure import RunResult
from bench.paired import Contender, alternate, median_ratio, median_run, process_group_cpu_s
from bench.speed_report import OURS, PEER, goals_table, runs_table


def result(system: str, tok_s: float, round_: int | None = None) -> RunResult:
    extra = {"itl_p50_s": 0.01} if round_ is None else {"itl_p50_s": 0.01, "round": round_}
    return RunResult(system, "W1", 1, 8, int(tok_s * 10), 10.0, 0.1, 0.2, extra)


def test_rounds_alternate_their_order_and_number_the_results():
    calls: list[str] = []

    def measure(label: str, index: int) -> RunResult:
        calls.append(label)
        assert index == len(calls[:-1]) // 2
        return result(label, 1.0)

    own_group = os.getpgid(0)
    a, b = Contender("a", own_group, measure), Contender("b", own_group, measure)
    results = alternate([a, b], rounds=3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert [(r.system, r.extra["round"]) for r in results] == [
        ("a", 1),
        ("b", 1),
        ("b", 2),
        ("a", 2),
        ("a", 3),
        ("b", 3),
    ]
    assert all(r.extra["idle_peer_cpu_s"] >= 0.0 for r in results)


def test_the_idle_peer_cpu_is_that_of_its_process_group():
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.time() + 0.6\nwhile time.time() < end: pass",
        ],
        start_new_session=True,
    )
    try:
        busy.wait(10)
    finally:
        busy.kill()
    # An exited group counts nothing; a live one (ours: this test is running) counts > 0.
    assert process_group_cpu_s(busy.pid) == 0.0
    assert process_group_cpu_s(os.getpgid(0)) > 0.0


def test_ratios_pair_runs_of_the_same_round_and_the_median_is_reported():
    ours = [result(OURS, 120.0, 1), result(OURS, 90.0, 2), result(OURS, 110.0, 3)]
    # The peer slowed down in round 2 exactly when we did: the pair still says 1.2x.
    peer = [result(PEER, 100.0, 1), result(PEER, 75.0, 2), result(PEER, 100.0, 3)]
    assert median_ratio(ours, peer) == 1.2
    assert median_run(ours).tok_s == 110.0
    assert median_run(ours[:2]).tok_s == 90.0  # even count: the lower middle run
    goals = goals_table(ours + peer)
    assert "median ratio 1.20× (rounds: 1.20×, 1.20×, 1.10×) | yes |" in goals
    table = runs_table(ours + peer)
    assert "| 120.0 / 90.0 / 110.0 | 1.20× |" in table


def test_single_runs_without_rounds_still_compare():
    goals = goals_table([result(OURS, 150.0), result(PEER, 100.0)])
    assert "150.0 vs 100.0 tok/s, median ratio 1.50× | yes |" in goals
