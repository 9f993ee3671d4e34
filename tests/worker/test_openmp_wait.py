"""The worker package sets libgomp's spin count before torch loads it, unless the user did."""

from __future__ import annotations

import os
import subprocess
import sys

from worker.machine.openmp_wait import SPIN_COUNT

PROBE = "import os, sys, worker; print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)"


def probe(env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_importing_the_worker_sets_the_spin_count_before_torch_loads():
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    assert probe(env) == f"{SPIN_COUNT} False"


def test_a_spin_count_the_user_set_is_kept():
    assert probe({**os.environ, "GOMP_SPINCOUNT": "1000"}) == "1000 False"
