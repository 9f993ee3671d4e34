"""The kernel probe: times the model's linear layers in each candidate layout and kernel on
this CPU, for the KernelPlan that worker/kernels/plan.py caches."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch

from worker.kernels.build import native_kernels_available
from worker.kernels.kquant_probe import (
    kquant_kernels_available,
    measure_kquant_rows,
    measure_tiles_rows,
)
from worker.kernels.layout import BlockRecords
from worker.kernels.plan import FLOAT32_LAYOUTS, KernelPlan
from worker.model.block_linear import BlockLinear, pack_blocks
from worker.model.linear import PackedLinear, mkldnn_linear_supports

PANEL_CANDIDATE_ROWS = (8, 16, 24, 32, 48, 64)
_BLOCK_SHAPE = (1536, 576)  # (out, in): the default model's MLP halves
# Distinct weights the block kernels are timed on, one after the other (18 MB), so that they
# stream as a decode step's do: on one weight kept in L2 the two kernels timed equal where a
# real step's matmuls ran faster on the panel kernel (docs/BENCHMARKS.md).
_BLOCK_WEIGHTS = 32
# Float32 layouts differ most when the weight streams from memory, as an output layer's does:
# 38 MB, more than the last-level caches of the CPUs this runs on.
_FLOAT32_SHAPE = (16384, 576)


def _best_ms(run: Callable[[], object], repeats: int = 5, calls: int = 3) -> float:
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e3


def _float32_layouts() -> list[str]:
    """The float32 layouts this torch build has."""
    return [
        layout
        for layout in FLOAT32_LAYOUTS
        if layout != "mkldnn" or mkldnn_linear_supports(torch.float32)
    ]


def _block_records(generator: torch.Generator) -> BlockRecords:
    """A random Q4_1 weight of _BLOCK_SHAPE, its records only (packing's float32 copy goes)."""
    packed = pack_blocks(torch.randn(_BLOCK_SHAPE, generator=generator) * 0.05, "q4_1")
    return BlockRecords(packed.records, packed.out_features)


@torch.inference_mode()
def measure() -> KernelPlan:
    """Time the candidates here and now (on the calling thread, with its torch threads)."""
    measured: dict[str, float] = {}
    generator = torch.Generator().manual_seed(0)
    weight = torch.full(_FLOAT32_SHAPE, 0.01)
    inputs = {rows: torch.randn(rows, _FLOAT32_SHAPE[1], generator=generator) for rows in (1, 8)}
    times: dict[int, dict[str, float]] = {rows: {} for rows in inputs}
    # One layout's copy of the weight alive at a time: the probe's peak memory stays below
    # what the model's load needs (a worker's peak RSS is the sum of both otherwise).
    for name in _float32_layouts():
        candidate = PackedLinear(weight, None, float32_layout=name)
        for rows, x in inputs.items():
            times[rows][name] = _best_ms(functools.partial(candidate, x), repeats=3, calls=1)
            measured[f"float32 {name} {rows} rows"] = times[rows][name]
        del candidate
    del weight
    scores: dict[str, float] = {}
    for by_layout in times.values():
        for name, ms in by_layout.items():
            # Relative to the best at this size, so one row and a batch weigh the same.
            scores[name] = scores.get(name, 0.0) + ms / min(by_layout.values())
    layout = min(scores, key=scores.__getitem__)
    panel_rows = 0
    if native_kernels_available():
        weights = [_block_records(generator) for _ in range(_BLOCK_WEIGHTS)]
        direct = [BlockLinear(records, None, "q4_1", 0) for records in weights]
        panel = [BlockLinear(records, None, "q4_1", 1) for records in weights]

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
    kquants = kquant_kernels_available()
    tiles_rows = measure_tiles_rows(measured) if kquants else {}
    kquant_rows = measure_kquant_rows(measured, tiles_rows) if kquants else {}
    return KernelPlan(panel_rows, layout, measured, kquant_rows, tiles_rows)
