"""How long torch's OpenMP threads spin for the next parallel region before they sleep."""

from __future__ import annotations

import os

# libgomp's default, 300,000 spins, is ~4 ms here: a compute thread sleeps whenever the engine
# thread spends longer between kernels (sampling, building the next batch, the I/O thread
# holding the GIL), and on a 2-core machine that also serves HTTP, a woken thread may then
# wait for a core the gateway or a client took. 3,000,000 (~35 ms): W2's mean TTFT over HTTP
# 0.512 -> 0.477 s (four alternating runs each on a 2-core Xeon, docs/BENCHMARKS.md), W1
# unchanged; an idle worker's threads still sleep after ~35 ms.
SPIN_COUNT = "3000000"


def set_openmp_wait() -> None:
    """GOMP_SPINCOUNT for this process unless the user set it. libgomp reads it once, when
    torch loads it: this must run before anything imports torch."""
    os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
