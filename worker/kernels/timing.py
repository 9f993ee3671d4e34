"""Timing a call as the probes and benchmarks do: the best of several runs after a warm-up."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


def best_ms(run: Callable[[], object], repeats: int = 5) -> float:
    """Milliseconds of the fastest of `repeats` calls of `run`, after one untimed call."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def run_each(calls: Sequence[Callable[[], object]]) -> None:
    """Every call in turn: distinct weights timed one after the other, as a step streams them."""
    for call in calls:
        call()
