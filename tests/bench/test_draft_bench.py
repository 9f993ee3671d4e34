"""Side-by-side benchmark rows: rounds paired by number, the median ratio, the counts."""

from bench.draft_bench import OFF, ON
from bench.measure import RunResult
from bench.side_by_side import row, table


def result(system: str, tok_s: float, round_: int) -> RunResult:
    return RunResult(system, "W1", 1, 8, int(tok_s * 10), 10.0, 0.1, 0.2, {"round": round_})


def test_a_row_pairs_rounds_and_takes_the_median_ratio():
    results = [
        result(ON.label, 12.0, 1),
        result(OFF.label, 10.0, 1),
        result(OFF.label, 10.0, 2),
        result(ON.label, 11.0, 2),
        result(ON.label, 15.0, 3),
        result(OFF.label, 10.0, 3),
    ]
    r = row(1, results, ON, OFF, drafted=30, kept=20)
    assert r["first_tok_s"] == [12.0, 11.0, 15.0] and r["second_tok_s"] == [10.0, 10.0, 10.0]
    assert r["ratios"] == [1.2, 1.1, 1.5] and r["median_ratio"] == 1.2
    lines = table([r], ON, OFF).splitlines()
    assert len(lines) == 3
    assert (
        lines[2]
        == "| 1 | 12.0 / 11.0 / 15.0 | 10.0 / 10.0 / 10.0 | 1.20, 1.10, 1.50 | 1.20× | 30 | 20 |"
    )
