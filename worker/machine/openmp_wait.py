"""How long torch's OpenMP threads spin for the next parallel region before they sleep."""

from __future__ import annotations

import os

# With libgomp's default, 300,000 spins, a compute thread sleeps whenever the engine thread
# spends a little longer between kernels (sampling, building the next batch, the I/O thread
# holding the GIL), and on a small machine that also serves HTTP, a woken thread may then
# wait for a core the gateway or a client took. Ten times as many spins lowered TTFT under
# load and left single streams as they were; an idle worker's threads still sleep soon
# (docs/BENCHMARKS.md).
SPIN_COUNT = "3000000"


def set_openmp_wait() -> None:
    """GOMP_SPINCOUNT for this process unless the user set it. libgomp reads it once, when
    torch loads it: this must run before anything imports torch."""
    os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
