"""Two servers measured in alternating rounds, so that a shared VM's drift hits both alike.

Why: on the 2-core VMs these benchmarks run on, one system's speed moves by 10-20% within
the hour. Measured one after the other, each server's throughput was a sample of a different
quarter of an hour, and a ratio of two such samples moved by as much as the goals it was
meant to judge. Here both servers are up at once, the runs alternate (A B, then B A, ...),
and each run also records how much CPU the idle server used meanwhile, to show it stayed idle.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.measure import RunResult

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of the live processes in process group `pgid`."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        # After the command: state, ppid, pgrp, ... utime is field 14 and stime 15 of stat.
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


@dataclass
class Contender:
    """A running server under its label: `measure(label, round)` runs one workload point on
    it (rounds count from 0)."""

    label: str
    pgid: int
    measure: Callable[[str, int], RunResult]


def alternate(contenders: Sequence[Contender], rounds: int) -> list[RunResult]:
    """`rounds` runs of each contender, order reversed every round; each result's extra
    holds its round and the CPU seconds the other contenders used during it."""
    results = []
    for index in range(rounds):
        order = contenders if index % 2 == 0 else list(reversed(contenders))
        for contender in order:
            others = [c.pgid for c in contenders if c is not contender]
            before = sum(process_group_cpu_s(pgid) for pgid in others)
            result = contender.measure(contender.label, index)
            result.extra["round"] = index + 1
            result.extra["idle_peer_cpu_s"] = sum(process_group_cpu_s(p) for p in others) - before
            results.append(result)
    return results


def median_run(runs: Sequence[RunResult]) -> RunResult:
    """The run of median throughput (the lower middle one for an even count)."""
    ranked = sorted(runs, key=lambda r: r.tok_s)
    return ranked[(len(ranked) - 1) // 2]


def round_ratios(ours: Sequence[RunResult], peer: Sequence[RunResult]) -> list[float]:
    """Our throughput over the peer's, round by round (runs of the same round paired)."""
    by_round = {r.extra.get("round"): r for r in peer}
    return [
        o.tok_s / by_round[o.extra.get("round")].tok_s
        for o in ours
        if o.extra.get("round") in by_round
    ]


def median_ratio(ours: Sequence[RunResult], peer: Sequence[RunResult]) -> float:
    return statistics.median(round_ratios(ours, peer))
