"""The K-quant tile kernels: the gemv's 8-bit arithmetic on the tile unit, and their routing."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T

from tests.worker.kernels.test_kquant_gemv import OUR_LAYOUT, dequantized, part
from tests.worker.native import needs_ggml, needs_native_kernels
from worker.kernels.kernel_table import KernelTable
from worker.kernels.kquant_probe import kquant_kernels_available, tiles_available
from worker.model.ggml_linear import GgmlLinear

pytestmark = [
    needs_native_kernels,
    needs_ggml,
    pytest.mark.skipif(
        not (kquant_kernels_available() and tiles_available()),
        reason="the tile kernel needs AMX-INT8 (and the gemv it stands in for)",
    ),
]

# Row counts within one tile, across pairs of tiles and their remainders; widths of one to
# eight super-blocks; outputs of one column tile, of two and of an odd count of them.
ROWS = [1, 5, 16, 17, 31, 32, 33, 64, 70]
SHAPES = [(16, 256), (48, 512), (64, 2048), (80, 768)]


@pytest.mark.parametrize("kind", [T.Q4_K, T.Q5_K, T.Q6_K], ids=lambda k: k.name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_tiles_compute_what_the_gemv_computes(kind, shape):
    out, k = shape
    p = part(kind, out, k, seed=out + k)
    weight = OUR_LAYOUT[kind](p)
    exact = dequantized(p)
    for rows in ROWS:
        x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
        tiles = torch.ops.astrai.kquant_tiles(x, weight, int(kind), out)
        gemv = torch.ops.astrai.kquant_gemv(x, weight, int(kind), out)
        scale = gemv.abs().max()
        # The same integers (each scale folded into the codes, split in two bytes, summed
        # whole); the floats added in another order (Q6_K: the gemv's per scale group).
        assert (tiles - gemv).abs().max() <= 2e-6 * scale, rows
        assert (tiles - x @ exact.T).abs().max() <= 3e-2 * scale, rows


def test_a_layer_takes_the_tiles_from_the_planned_rows_and_the_gemv_below():
    parts = [
        part(T.Q4_K, 32, 512, 1),
        part(T.Q4_K, 8, 512, 2),
        part(T.Q5_K, 16, 512, 3),
        part(T.Q6_K, 16, 512, 6),
    ]
    table = KernelTable(tiles_rows={"Q4_K": 16, "Q6_K": 32})
    routes = table.parts(parts)
    # 8 rows are half a column tile: that part keeps the gemv at every row count; Q5_K follows
    # Q4_K's rows (the same woven layout), Q6_K its own.
    assert [r.tiles_from for r in routes] == [16, 0, 16, 32]
    layer = GgmlLinear(parts, None, routes)
    assert [(s.parts, s.tiles_from) for s in layer.segments] == [
        ((0, 1), 16),
        ((1, 2), 0),
        ((2, 3), 16),
        ((3, 4), 32),
    ]
    ours = torch.ops.astrai
    for rows in (15, 16, 32):
        x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(rows))
        woven = ours.kquant_tiles if rows >= 16 else ours.kquant_gemv
        grouped = ours.kquant_tiles if rows >= 32 else ours.kquant_gemv
        expected = torch.cat(
            [
                woven(x, layer.weights[0], int(T.Q4_K), 32),
                ours.kquant_gemv(x, layer.weights[1], int(T.Q4_K), 8),
                woven(x, layer.weights[2], int(T.Q5_K), 16),
                grouped(x, layer.weights[3], int(T.Q6_K), 16),
            ],
            dim=1,
        )
        assert torch.equal(layer(x), expected), rows
    assert "AMX tiles from 16 rows" in table.part_kernel(routes[0])


def test_the_tiles_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("ASTRAI_KQUANT_TILES", "0")
    assert not tiles_available()
    routes = KernelTable(tiles_rows={"Q4_K": 16}).parts([part(T.Q4_K, 16, 256, 4)])
    assert [r.tiles_from for r in routes] == [0]


def test_the_tiles_refuse_what_they_cannot_read():
    q4k = OUR_LAYOUT[T.Q4_K](part(T.Q4_K, 16, 256, 5))
    with pytest.raises(RuntimeError, match=r"Q4_K .* or grouped Q6_K"):
        torch.ops.astrai.kquant_tiles(torch.randn(2, 256), q4k, int(T.Q8_0), 16)
    with pytest.raises(RuntimeError, match="multiple of 16"):
        torch.ops.astrai.kquant_tiles(torch.randn(2, 256), q4k[:8], int(T.Q4_K), 8)
    with pytest.raises(RuntimeError, match="multiple of 256"):
        torch.ops.astrai.kquant_tiles(torch.randn(2, 100), q4k, int(T.Q4_K), 16)
