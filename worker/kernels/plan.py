"""KernelPlan: which matmul kernels and layouts this CPU runs fastest, measured once and cached.

Instruction-set flags decide what can run (worker/machine/cpu_info.py,
worker/kernels/build.py); they do not decide what runs fastest: the same float32 matmul layout
was 1.4x faster on an AVX-512 Xeon and 2.5x slower on an AVX2 EPYC. So a short probe (well
under a second) times the candidates on shapes of the default model, and the choice is cached
per CPU signature and torch version under `<cache>/kernels/`.
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
from worker.kernels.kquant_probe import (
    KQUANT_TYPES,
    kquant_kernels_available,
    measure_kquant_rows,
)
from worker.machine.cpu_info import cpu_signature
from worker.machine.paths import cache_root
from worker.model.linear import PackedLinear, mkldnn_linear_supports

log = logging.getLogger(__name__)

PLAN_VERSION = 3  # 3: the K-quant panel kernels against ggml's
FLOAT32_LAYOUTS = ("mm", "linear", "mkldnn")
PANEL_CANDIDATE_ROWS = (8, 16, 24, 32, 48, 64)
_BLOCK_SHAPE = (1536, 576)  # (out, in): the default model's MLP halves
# Distinct weights the block kernels are timed on, one after the other (18 MB), so that they
# stream as a decode step's do. On one weight kept in L2 the two kernels timed equal at 32
# rows on a 2-core Xeon with AMX, where a real step's 120 matmuls took 26.4 ms direct and
# 20.2 ms on the panel kernel (`python -m bench.kernel_bench`).
_BLOCK_WEIGHTS = 32
# Float32 layouts differ most when the weight streams from memory, as an output layer's does:
# 38 MB, more than the last-level caches of the CPUs this runs on.
_FLOAT32_SHAPE = (16384, 576)


@dataclass(frozen=True)
class KernelPlan:
    # Block matmuls of this many rows or more take the panel kernel; 0: never.
    panel_rows: int = 16
    # Float32 linear layers: "mm" (x @ w.T stored transposed), "linear" (F.linear) or
    # "mkldnn" (oneDNN's packed weight).
    float32_layout: str = "mm"
    measured_ms: dict[str, float] = field(default_factory=dict, compare=False)
    # Per K-quant type ("Q4_K", "Q6_K"): from this many rows on, the panel kernel instead of
    # ggml's (worker/kernels/kquant_probe.py); absent or 0: never.
    kquant_panel_rows: dict[str, int] = field(default_factory=dict)

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
        return f"block panel kernel {panel}; float32 layers as {self.float32_layout}{extra}"


def _best_ms(run: Callable[[], object], repeats: int = 5, calls: int = 3) -> float:
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e3


def _float32_candidates(weight: torch.Tensor) -> dict[str, PackedLinear]:
    """One PackedLinear per float32 layout this torch build has."""
    return {
        layout: PackedLinear(weight, None, float32_layout=layout)
        for layout in FLOAT32_LAYOUTS
        if layout != "mkldnn" or mkldnn_linear_supports(torch.float32)
    }


@torch.inference_mode()
def measure() -> KernelPlan:
    """Time the candidates here and now (on the calling thread, with its torch threads)."""
    measured: dict[str, float] = {}
    generator = torch.Generator().manual_seed(0)
    weight = torch.full(_FLOAT32_SHAPE, 0.01)
    scores: dict[str, float] = {}
    for rows in (1, 8):
        x = torch.randn(rows, _FLOAT32_SHAPE[1], generator=generator)
        times = {
            name: _best_ms(functools.partial(f, x), repeats=3, calls=1)
            for name, f in _float32_candidates(weight).items()
        }
        for name, ms in times.items():
            measured[f"float32 {name} {rows} rows"] = ms
            # Relative to the best at this size, so one row and a batch weigh the same.
            scores[name] = scores.get(name, 0.0) + ms / min(times.values())
    layout = min(scores, key=scores.__getitem__)
    panel_rows = 0
    if native_kernels_available():
        from worker.model.block_linear import BlockLinear, pack_blocks

        weights = [
            pack_blocks(torch.randn(_BLOCK_SHAPE, generator=generator) * 0.05, "q4_1")
            for _ in range(_BLOCK_WEIGHTS)
        ]
        direct = [BlockLinear(packed, None, "q4_1", 0) for packed in weights]
        panel = [BlockLinear(packed, None, "q4_1", 1) for packed in weights]

        def every(layers: list[BlockLinear], x: torch.Tensor) -> None:
            for layer in layers:
                layer(x)

        for rows in PANEL_CANDIDATE_ROWS:
            x = torch.randn(rows, _BLOCK_SHAPE[1], generator=generator)
            direct_ms = _best_ms(functools.partial(every, direct, x), repeats=3, calls=1)
            panel_ms = _best_ms(functools.partial(every, panel, x), repeats=3, calls=1)
            measured[f"q4_1 direct {rows} rows"] = direct_ms / _BLOCK_WEIGHTS
            measured[f"q4_1 panel {rows} rows"] = panel_ms / _BLOCK_WEIGHTS
            if panel_ms < 0.95 * direct_ms:
                panel_rows = rows
                break
    kquant_rows = measure_kquant_rows(measured) if kquant_kernels_available() else {}
    return KernelPlan(panel_rows, layout, measured, kquant_rows)


def _plan_file() -> Path:
    # The kernels' build key covers their sources too: changed kernels are measured again.
    kernels = build_key() if native_kernels_available() else "none"
    key = f"{PLAN_VERSION}|{cpu_signature()}|{torch.__version__}|{kernels}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_root() / "kernels" / f"plan-{digest}.json"


def _cached(path: Path) -> KernelPlan | None:
    try:
        data = json.loads(path.read_text())
        return KernelPlan(
            data["panel_rows"],
            data["float32_layout"],
            data["measured_ms"],
            {str(k): int(v) for k, v in data.get("kquant_panel_rows", {}).items()},
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cpu_busy() -> bool:
    """More runnable work than cores over the last minute: timings taken now would be off."""
    return os.getloadavg()[0] > (os.cpu_count() or 1)


@functools.cache
def kernel_plan() -> KernelPlan:
    """This CPU's plan (`_measured_plan`), with ASTRAI_KQUANT_PANEL_ROWS's rows if set."""
    return with_kquant_override(_measured_plan(), os.environ.get("ASTRAI_KQUANT_PANEL_ROWS"))


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


def _measured_plan() -> KernelPlan:
    """This CPU's plan: from the cache, or measured now (once per CPU and torch version).

    Why the lock and the load check: a plan measured while the CPU was shared (two workers
    of `astrai serve` probing side by side, or a test run) was cached for good, and one such
    plan sent 16-row steps to the slower kernel and float32 layers to a layout 2.4x slower.
    Workers now measure one at a time, and a plan measured on a busy CPU serves this process
    only.
    """
    path = _plan_file()
    plan = _cached(path)
    if plan is not None:
        return plan
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        plan = _cached(path)  # measured by another worker while this one waited
        if plan is not None:
            return plan
        busy = cpu_busy()
        start = time.monotonic()
        plan = measure()
        elapsed = time.monotonic() - start
        log.info("measured this CPU's kernels in %.1f s: %s", elapsed, plan.describe())
        if busy:
            log.warning(
                "the CPU was busy (load %.1f on %d cores): this plan is not cached, the next "
                "start measures again",
                os.getloadavg()[0],
                os.cpu_count() or 1,
            )
            return plan
        staging = path.with_suffix(f".{time.monotonic_ns()}.tmp")
        staging.write_text(json.dumps(asdict(plan), indent=2))
        staging.replace(path)  # atomic: a reader never sees half a file
    return plan
