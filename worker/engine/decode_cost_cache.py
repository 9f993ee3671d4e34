"""The decode-cost probe's table, cached per machine and model setup as the kernel plan is."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch

from worker.engine.speculation import DecodeCost
from worker.kernels.plan import cpu_busy
from worker.machine.cpu_info import cpu_signature
from worker.machine.paths import cache_root
from worker.model.model_dir import model_files

log = logging.getLogger(__name__)
# Bumped when the probe's rows or method change: older tables are then measured again.
COST_VERSION = 1


def model_identity(model_dir: Path) -> str:
    """The folder's config and weight files (and the GGUF it reads), by name, size and
    change time: another model, or the same one changed, is measured again."""
    files = model_files(model_dir)
    return ";".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)


def cached_decode_cost(setup: str, measure: Callable[[], DecodeCost]) -> tuple[DecodeCost, bool]:
    """The table for `setup` (the model and every option that changes a step's time), and
    whether it was measured now. Measured at the first start on a quiet CPU and cached;
    the worker's served steps correct it from then on (ServedDecodeCost), as they correct a
    fresh one. Workers measure one at a time: probes side by side would time each other."""
    key = f"{COST_VERSION}|{cpu_signature()}|{torch.__version__}|{setup}"
    path = (
        cache_root()
        / "kernels"
        / f"decode-cost-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    )
    cached = _read(path)
    if cached is not None:
        return cached, False
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        cached = _read(path)  # measured by another worker while this one waited
        if cached is not None:
            return cached, False
        busy = cpu_busy()
        cost = measure()
        if busy:  # not kept: the next start measures again
            log.info("the CPU is busy: this decode-cost table is used, not cached")
            return cost, True
        staging = path.with_suffix(f".{time.monotonic_ns()}.tmp")
        staging.write_text(json.dumps({"rows": cost.rows, "seconds": cost.seconds}))
        staging.replace(path)  # atomic: a reader never sees half a file
    return cost, True


def _read(path: Path) -> DecodeCost | None:
    try:
        data = json.loads(path.read_text())
        return DecodeCost(tuple(map(int, data["rows"])), tuple(map(float, data["seconds"])))
    except (OSError, ValueError, KeyError, TypeError):
        return None
