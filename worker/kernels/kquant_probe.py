"""From how many rows the panel kernels beat the few-row kernels on K-quant weights, measured
here (our 8-bit gemv for the types it takes on this CPU, else ggml's own).

ggml's kernels for Q4_K and Q6_K quantize the activations to 8 bits and multiply integers;
ours (csrc/kquant_matmul.cpp) unpack each block once per panel and multiply float32 (bf16
tiles on AMX). Which wins at a given number of rows depends on the CPU's instructions: with
AMX the panels win from a few rows on, without it ggml's VNNI gemm holds its own for Q4_K
(docs/bench/HISTORY.md, "K-quant panel kernels (eleventh session, 2026-12-02)"). So it is
timed, not assumed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import torch

from worker.kernels.build import native_kernels_available
from worker.kernels.ggml_build import ggml_kernels_available
from worker.kernels.timing import best_ms, run_each

# ggml type ids of the K-quants the panel kernels read, and of those our gemv reads.
KQUANT_TYPES = {"Q4_K": 12, "Q6_K": 14}
GEMV_TYPE_IDS = {"Q4_K": 12, "Q5_K": 13, "Q6_K": 14}
CANDIDATE_ROWS = (8, 12, 16, 32, 64)
_SHAPE = (512, 2048)  # (out, in): a projection of a 1 B-class model, whole super-blocks
_WEIGHTS = 6  # distinct weights timed in turn (~3.5 MB of Q4_K), so that they stream


def kquant_kernels_available() -> bool:
    """Both libraries loaded and the panel kernels compiled in (AVX2 or wider)."""
    if not (native_kernels_available() and ggml_kernels_available()):
        return False
    return bool(torch.ops.astrai.kquant_linear_available())


def gemv_types() -> frozenset[str]:
    """The K-quant types whose rows below the panels' take our 8-bit gemv
    (csrc/kquant_gemv.h) rather than ggml's kernels: Q4_K, Q5_K and Q6_K from AVX2 on (the
    build says which); none where ASTRAI_KQUANT_GEMV=0."""
    if os.environ.get("ASTRAI_KQUANT_GEMV", "1") == "0" or not kquant_kernels_available():
        return frozenset()
    available = torch.ops.astrai.kquant_gemv_available
    return frozenset(name for name, kind in GEMV_TYPE_IDS.items() if available(kind))


def gemv_available(type_name: str = "Q4_K") -> bool:
    """Whether our gemv takes `type_name` here (gemv_types)."""
    return type_name in gemv_types()


def tiles_available() -> bool:
    """Whether woven Q4_K and Q5_K can take the tile unit here (csrc/kquant_tiles.h: AMX-INT8,
    granted by Linux); not where ASTRAI_KQUANT_TILES=0."""
    if os.environ.get("ASTRAI_KQUANT_TILES", "1") == "0" or not gemv_available("Q4_K"):
        return False
    return bool(torch.ops.astrai.kquant_tiles_available())


def gemv_isa() -> str:
    """The instructions our gemv runs on here: its zmm form or its ymm one."""
    return "AVX-512 VNNI" if torch.ops.astrai.kquant_gemv_zmm() else "AVX2"


def _ms_per_matmul(
    op: Callable[..., torch.Tensor],
    x: torch.Tensor,
    weights: list[torch.Tensor],
    kind: int,
    out: int,
) -> float:
    """The best time of `op(x, weight, kind, out)` per weight, the weights taken in turn so
    that they stream from memory (ms)."""
    calls = [functools.partial(op, x, w, kind, out) for w in weights]
    return best_ms(functools.partial(run_each, calls), repeats=3) / _WEIGHTS


def _ggml_linear(
    x: torch.Tensor, weight: torch.Tensor, kind: int, out: int, woven: int
) -> torch.Tensor:
    """ggml's kernel on one weight, as _ms_per_matmul calls the others."""
    result: torch.Tensor = torch.ops.astrai_ggml.linear(x, [weight], [kind], [out], [woven], None)
    return result


@torch.inference_mode()
def measure_kquant_rows(
    measured: dict[str, float], tiles_rows: dict[str, int] | None = None
) -> dict[str, int]:
    """Per K-quant type, the fewest rows at which the panel kernel took < 0.95x the time of
    the kernel fewer rows take (our gemv where there is one, on the tile unit from the type's
    `tiles_rows`, else ggml's); 0: at none of the candidates, and for Q6_K wherever our
    gemv is (ggml_linear.py's _kernel_layout). Every timing goes into `measured` (ms per
    matmul)."""
    ggml, ours = torch.ops.astrai_ggml, torch.ops.astrai
    generator = torch.Generator().manual_seed(0)
    out, width = _SHAPE
    rows_by_type: dict[str, int] = {}
    for name, kind in KQUANT_TYPES.items():
        woven = int(ggml.can_interleave(kind, out))
        # One weight quantized (ggml's K-quant search is the slow part), in distinct copies.
        codes = ggml.quantize(torch.randn(_SHAPE, generator=generator) * 0.02, kind)
        codes = ggml.interleave(codes, kind, width) if woven else codes
        weights = [codes.clone() for _ in range(_WEIGHTS)]
        if name == "Q4_K" and not woven:  # our Q4_K kernel reads ggml's woven bytes only
            rows_by_type[name] = 0
            continue
        gemv = gemv_available(name)
        if name == "Q6_K" and gemv:  # grouped for the gemv, which takes every row count
            rows_by_type[name] = 0
            continue
        rows_by_type[name] = 0
        for rows in CANDIDATE_ROWS:
            x = torch.randn(rows, width, generator=generator)
            tiles_from = (tiles_rows or {}).get(name, 0)
            tiles = bool(tiles_from) and rows >= tiles_from
            fewer_op: Callable[..., torch.Tensor] = functools.partial(_ggml_linear, woven=woven)
            if gemv:
                fewer_op = ours.kquant_tiles if tiles else ours.kquant_gemv
            fewer_ms = _ms_per_matmul(fewer_op, x, weights, kind, out)
            panel_ms = _ms_per_matmul(ours.kquant_linear, x, weights, kind, out)
            fewer_name = "tiles" if tiles else "gemv" if gemv else "ggml"
            measured[f"{name} {fewer_name} {rows} rows"] = fewer_ms
            measured[f"{name} panel {rows} rows"] = panel_ms
            if panel_ms < 0.95 * fewer_ms:
                rows_by_type[name] = rows
                break
    return rows_by_type


# The types whose tile threshold is measured (Q5_K follows Q4_K's: the same woven layout).
TILE_PROBE_TYPES = ("Q4_K", "Q6_K")


@torch.inference_mode()
def measure_tiles_rows(measured: dict[str, float]) -> dict[str, int]:
    """Per type of TILE_PROBE_TYPES, the fewest rows at which the tile kernel took < 0.95x the
    gemv's time (the same arithmetic, csrc/kquant_tiles.h) on the bytes as the gemv reads them
    (Q4_K woven, Q6_K grouped); 0: at none of the candidates. Empty without tiles here. Every
    timing goes into `measured` (ms per matmul)."""
    if not tiles_available():
        return {}
    ggml, ours = torch.ops.astrai_ggml, torch.ops.astrai
    generator = torch.Generator().manual_seed(1)
    out, width = _SHAPE
    rows_by_type: dict[str, int] = {}
    for name in TILE_PROBE_TYPES:
        kind = KQUANT_TYPES[name]
        rows_by_type[name] = 0
        codes = ggml.quantize(torch.randn(_SHAPE, generator=generator) * 0.02, kind)
        if name == "Q4_K":
            if not ggml.can_interleave(kind, out):
                continue
            codes = ggml.interleave(codes, kind, width)
        else:
            codes = ours.kquant_q6k_group(codes)
        weights = [codes.clone() for _ in range(_WEIGHTS)]
        for rows in CANDIDATE_ROWS:
            x = torch.randn(rows, width, generator=generator)
            gemv_ms = _ms_per_matmul(ours.kquant_gemv, x, weights, kind, out)
            tiles_ms = _ms_per_matmul(ours.kquant_tiles, x, weights, kind, out)
            measured[f"{name} gemv {rows} rows"] = gemv_ms
            measured[f"{name} tiles {rows} rows"] = tiles_ms
            if tiles_ms < 0.95 * gemv_ms:
                rows_by_type[name] = rows
                break
    return rows_by_type
