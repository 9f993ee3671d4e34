"""KernelPlan: which matmul kernels and layouts this CPU runs fastest, measured once and cached.

Instruction-set flags decide what can run (worker/machine/cpu_info.py,
worker/kernels/build.py); they do not decide what runs fastest: the same float32 matmul layout
was the faster one on an AVX-512 Xeon and the slower one on an AVX2 EPYC (docs/BENCHMARKS.md,
Figures behind the code). So a short probe (worker/model/kernel_probe.py) times the candidates
on shapes of the
default model, and the choice is cached per CPU signature and torch version under
`<cache>/kernels/`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from worker.kernels.build import build_key, native_kernels_available
from worker.kernels.kquant_probe import KQUANT_TYPES
from worker.machine.cpu_info import cpu_signature
from worker.machine.heap import release_freed_heap
from worker.machine.paths import cache_root

log = logging.getLogger(__name__)

PLAN_VERSION = 6  # 5: the K-quant tile kernel against our gemv; 6: 12 rows a candidate
FLOAT32_LAYOUTS = ("mm", "linear", "mkldnn")


@dataclass(frozen=True)
class KernelPlan:
    # Block matmuls of this many rows or more take the panel kernel; 0: never.
    panel_rows: int = 16
    # Float32 linear layers: "mm" (x @ w.T stored transposed), "linear" (F.linear) or
    # "mkldnn" (oneDNN's packed weight).
    float32_layout: str = "mm"
    # The probe's timings: why the plan is what it is, not part of it (a re-measured plan
    # that decides the same is equal and prints the same: the KV disk tier's pages keep).
    measured_ms: dict[str, float] = field(default_factory=dict, compare=False, repr=False)
    # Per K-quant type ("Q4_K", "Q6_K"): from this many rows on, the panel kernel instead of
    # ggml's (worker/kernels/kquant_probe.py); absent or 0: never.
    kquant_panel_rows: dict[str, int] = field(default_factory=dict)
    # Per K-quant type ("Q4_K", also for Q5_K; "Q6_K"): from this many rows on, the tile unit
    # (AMX-INT8) instead of our gemv, the same arithmetic (worker/kernels/kquant_probe.py);
    # absent or 0: never.
    kquant_tiles_rows: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.float32_layout not in FLOAT32_LAYOUTS:
            raise ValueError(
                f"float32_layout must be one of {FLOAT32_LAYOUTS}, got {self.float32_layout!r}"
            )

    def describe(self) -> str:
        panel = f"from {self.panel_rows} rows" if self.panel_rows else "never"
        kquants = ", ".join(
            f"{name} from {rows} rows" if rows else f"{name} never"
            for name, rows in sorted(self.kquant_panel_rows.items())
        )
        extra = f"; K-quant panels: {kquants}" if kquants else ""
        on_tiles = sorted((name, rows) for name, rows in self.kquant_tiles_rows.items() if rows)
        tiles = ", ".join(f"{name} from {rows} rows" for name, rows in on_tiles)
        if tiles:
            extra += f"; K-quant tile unit: {tiles}"
        return f"block panel kernel {panel}; float32 layers as {self.float32_layout}{extra}"


def _plan_file() -> Path:
    # The kernels' build key covers their sources too: changed kernels are measured again.
    kernels = build_key() if native_kernels_available() else "none"
    key = f"{PLAN_VERSION}|{cpu_signature()}|{torch.__version__}|{kernels}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / "kernels" / f"plan-{digest}.json"


def _cached(path: Path) -> tuple[KernelPlan, bool] | None:
    """The plan cached at `path`, and whether it is provisional (measured on a busy CPU)."""
    try:
        data = json.loads(path.read_text())
        plan = KernelPlan(
            data["panel_rows"],
            data["float32_layout"],
            data["measured_ms"],
            {str(k): int(v) for k, v in data.get("kquant_panel_rows", {}).items()},
            {str(k): int(v) for k, v in data.get("kquant_tiles_rows", {}).items()},
        )
        return plan, bool(data.get("provisional", False))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cpu_busy() -> bool:
    """More runnable work than cores over the last minute: timings taken now would be off."""
    return os.getloadavg()[0] > (os.cpu_count() or 1)


@functools.cache
def kernel_plan(measure: Callable[[], KernelPlan]) -> KernelPlan:
    """This CPU's plan (`_measured_plan`, by `measure`: worker.model.kernel_probe.measure times
    the model's layers), with ASTRAI_KQUANT_PANEL_ROWS's rows if set."""
    plan = _measured_plan(measure)
    return with_kquant_override(plan, os.environ.get("ASTRAI_KQUANT_PANEL_ROWS"))


def with_kquant_override(plan: KernelPlan, setting: str | None) -> KernelPlan:
    """`setting` "Q4_K=16,Q6_K=32" (or one number for both; 0: never) replaces the measured
    rows from which K-quant layers take the panel kernels: to pin the choice (benchmarks,
    tests), not to tune it, which the probe does per CPU."""
    if not setting:
        return plan
    rows = dict(plan.kquant_panel_rows)
    try:
        for item in setting.split(","):
            name, _, value = item.rpartition("=")
            for kind in [name.strip()] if name else list(KQUANT_TYPES):
                if kind not in KQUANT_TYPES or int(value) < 0:
                    raise ValueError(kind)
                rows[kind] = int(value)
    except ValueError as exc:
        raise ValueError(
            f"ASTRAI_KQUANT_PANEL_ROWS={setting!r}: expected rows (a number >= 0) or "
            f"TYPE=rows pairs with TYPE in {sorted(KQUANT_TYPES)}"
        ) from exc
    return dataclasses.replace(plan, kquant_panel_rows=rows)


def _measured_plan(measure: Callable[[], KernelPlan]) -> KernelPlan:
    """This CPU's plan: from the cache, or measured now (once per CPU and torch version).

    Why the lock and the load check: a plan measured while the CPU was shared (two workers
    of `astrai serve` probing side by side, or a test run) was cached for good, and one such
    plan sent 16-row steps to the slower kernel and float32 layers to the slower layout.
    Workers measure one at a time, and a plan measured on a busy CPU is cached as
    provisional: starts on a CPU still busy take it (measuring again there would be no better,
    and costs seconds and the probe's memory at every start), and the first start on a quiet
    CPU measures again and caches that for good.
    """
    path = _plan_file()
    cached = _cached(path)
    if cached is not None and _settled(cached[1]):
        return cached[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        cached = _cached(path)  # measured by another worker while this one waited
        if cached is not None and _settled(cached[1]):
            return cached[0]
        busy = cpu_busy()
        start = time.monotonic()
        plan = measure()
        release_freed_heap()  # the probe's weights, freed: not the worker's to keep in RSS
        elapsed = time.monotonic() - start
        log.info("measured this CPU's kernels in %.1f s: %s", elapsed, plan.describe())
        if busy:
            log.warning(
                "the CPU was busy (load %.1f on %d cores): this plan is provisional, the next "
                "start on a quiet CPU measures again",
                os.getloadavg()[0],
                os.cpu_count() or 1,
            )
        staging = path.with_suffix(f".{time.monotonic_ns()}.tmp")
        staging.write_text(json.dumps({**asdict(plan), "provisional": busy}, indent=2))
        staging.replace(path)  # atomic: a reader never sees half a file
    return plan


def _settled(provisional: bool) -> bool:
    """Whether to take a cached plan as it is: measured on a quiet CPU, or provisional while
    the CPU is still busy."""
    if not provisional:
        return True
    if cpu_busy():
        log.info("this CPU's kernel plan was measured on a busy CPU, which is busy still: taken")
        return True
    return False
