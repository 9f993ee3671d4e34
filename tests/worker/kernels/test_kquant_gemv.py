"""The K-quant gemv: ggml's 8-bit arithmetic on the same bits, fused parts as one."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T

from tests.worker.native import needs_ggml, needs_native_kernels
from worker.kernels.kernel_table import KernelTable
from worker.kernels.kquant_probe import gemv_available, gemv_types, kquant_kernels_available
from worker.model.ggml_linear import (
    GgmlLinear,
    GroupedQ6KEmbedding,
    QuantTensor,
    grouped_q6k_head,
)

pytestmark = [needs_native_kernels, needs_ggml]
needs_gemv = pytest.mark.skipif(
    not (kquant_kernels_available() and gemv_types() == {"Q4_K", "Q5_K", "Q6_K"}),
    reason="the gemv is built for CPUs with AVX2 or wider",
)

# Row counts across its runs of four and eight rows and their remainders; widths of one to
# eight super-blocks; outputs of one woven group and of several (and, for Q6_K, whose columns
# go four at a time from four rows on, a count that leaves two).
ROWS = [1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 19]
SHAPES = [(8, 256), (48, 512), (64, 2048), (24, 768)]
CASES = [(kind, shape) for kind in (T.Q4_K, T.Q5_K, T.Q6_K) for shape in SHAPES]
CASES += [(T.Q6_K, (10, 512))]
# How our gemv reads each type's bytes: woven by ggml (as ggml's own kernels read them too),
# woven or grouped by us.
OUR_LAYOUT = {
    T.Q4_K: lambda p: ggml().interleave(p.data, p.type, p.cols),
    T.Q5_K: lambda p: torch.ops.astrai.kquant_q5k_weave(p.data),
    T.Q6_K: lambda p: torch.ops.astrai.kquant_q6k_group(p.data),
}


def ggml():
    return torch.ops.astrai_ggml


def part(kind: T, out: int, k: int, seed: int) -> QuantTensor:
    weight = torch.randn(out, k, generator=torch.Generator().manual_seed(seed))
    return QuantTensor(int(kind), kind.name, ggml().quantize(weight, int(kind)), out, k)


def linear(
    parts: list[QuantTensor],
    bias: torch.Tensor | None,
    panel_rows: dict[str, int] | None = None,
    gemv: bool = True,
) -> GgmlLinear:
    """The layer as the loader builds it: each part routed by the kernel table."""
    return GgmlLinear(parts, bias, KernelTable(panel_rows, gemv=gemv).parts(parts))


def dequantized(p: QuantTensor) -> torch.Tensor:
    return ggml().rows(p.data, p.type, p.cols, torch.arange(p.rows))


@needs_gemv
@pytest.mark.parametrize(("kind", "shape"), CASES, ids=lambda c: str(getattr(c, "name", c)))
def test_the_gemv_computes_what_ggml_computes_on_the_same_bytes(kind, shape):
    out, k = shape
    p = part(kind, out, k, seed=out + k)
    woven = int(kind == T.Q4_K)
    weight = ggml().interleave(p.data, p.type, k) if woven else p.data
    ours_bytes = OUR_LAYOUT[kind](p)
    exact = dequantized(p)
    for rows in ROWS:
        x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
        ours = torch.ops.astrai.kquant_gemv(x, ours_bytes, int(kind), out)
        theirs = ggml().linear(x, [weight], [int(kind)], [out], [woven], None)
        scale = theirs.abs().max()
        # Both round the activations to 8 bits per 256 inputs and multiply integers: equal
        # but for the order of float additions.
        assert (ours - theirs).abs().max() <= 2e-6 * scale, rows
        # And that rounding is all that parts them from the float product.
        assert (ours - x @ exact.T).abs().max() <= 3e-2 * scale, rows


@needs_gemv
def test_a_fused_layer_multiplies_each_run_of_one_type_as_one_weight():
    parts = [
        part(T.Q4_K, 32, 512, 1),
        part(T.Q4_K, 16, 512, 2),
        part(T.Q6_K, 16, 512, 3),
        part(T.Q8_0, 8, 512, 4),
    ]
    bias = torch.randn(72)
    layer = linear(parts, bias)
    assert [(s.parts, s.gemv) for s in layer.segments] == [
        ((0, 2), True),
        ((2, 3), True),
        ((3, 4), False),
    ]
    merged = layer.segments[0].weight
    assert merged.shape[0] == 48
    # The two Q4_K parts are views of the one weight: held once.
    assert layer.weights[0].data_ptr() == merged.data_ptr()
    assert layer.weights[1].data_ptr() == merged[32:].data_ptr()

    without = linear(parts, bias, gemv=False)
    assert [s.gemv for s in without.segments] == [False]
    reference = torch.cat([dequantized(p) for p in parts])
    for rows in (1, 3, 6):
        x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(rows))
        out, plain = layer(x), without(x)
        assert (out - plain).abs().max() <= 1e-5 * plain.abs().max()
        assert (out - (x @ reference.T + bias)).abs().max() <= 3e-2 * plain.abs().max()


@needs_gemv
def test_rows_past_the_panels_threshold_leave_the_gemv_for_the_panels_q6_k_never():
    parts = [part(T.Q4_K, 16, 256, 5), part(T.Q6_K, 8, 256, 6)]
    layer = linear(parts, None, {"Q4_K": 4, "Q6_K": 2})
    assert layer.part_panel_rows == [4, 0]
    reference = torch.cat([dequantized(p) for p in parts])
    x = torch.randn(6, 256, generator=torch.Generator().manual_seed(0))
    panel_q4k = torch.ops.astrai.kquant_linear(x, layer.weights[0], int(T.Q4_K), 16)
    gemv_q6k = torch.ops.astrai.kquant_gemv(x, layer.weights[1], int(T.Q6_K), 8)
    # Six rows: the Q4_K part on the (exact, float32) panels, the Q6_K part (grouped) on the
    # gemv whatever the plan says.
    assert torch.equal(layer(x), torch.cat([panel_q4k, gemv_q6k], dim=1))
    assert (panel_q4k - x @ reference[:16].T).abs().max() <= 1e-4 * panel_q4k.abs().max()
    assert torch.equal(layer.weights[1], torch.ops.astrai.kquant_q6k_group(parts[1].data))


def _ones(b: torch.Tensor) -> int:
    return sum(int(v).bit_count() for v in b.flatten().tolist())


@needs_gemv
def test_grouping_keeps_every_byte_of_a_q6_k_block():
    p = part(T.Q6_K, 24, 768, 9)
    grouped = torch.ops.astrai.kquant_q6k_group(p.data)
    assert grouped.shape == p.data.shape and not torch.equal(grouped, p.data)
    blocks, grouped_blocks = p.data.view(-1, 210), grouped.view(-1, 210)
    # Scales and d as they lie; the 6-bit codes, rearranged, hold the same bits.
    assert torch.equal(blocks[:, 192:], grouped_blocks[:, 192:])
    assert _ones(blocks[:, :192]) == _ones(grouped_blocks[:, :192])
    with pytest.raises(RuntimeError, match="210"):
        torch.ops.astrai.kquant_q6k_group(p.data[:, :100])


@needs_gemv
def test_weaving_keeps_every_bit_of_a_q5_k_block_and_takes_rows_in_eights():
    p = part(T.Q5_K, 16, 512, 11)
    woven = torch.ops.astrai.kquant_q5k_weave(p.data)
    assert woven.shape == p.data.shape and not torch.equal(woven, p.data)
    # Per group of eight rows and super-block: d and dmin as they lie, the 6-bit scales and
    # minimums repacked, the codes' four low bits and fifth bits moved.
    for group in range(2):
        rows = p.data[8 * group : 8 * group + 8].reshape(8, 2, 176)
        supers = woven[8 * group : 8 * group + 8].reshape(2, 1408)
        for s in range(2):
            block, out = rows[:, s], supers[s]
            assert torch.equal(block[:, :2].flatten(), out[:16])
            assert torch.equal(block[:, 2:4].flatten(), out[16:32])
            assert _ones(block[:, 4:16]) == _ones(out[32:128])
            assert _ones(block[:, 16:48]) == _ones(out[1152:])
            assert _ones(block[:, 48:]) == _ones(out[128:1152])
    layer = linear([p, part(T.Q5_K, 12, 512, 12)], None)
    # Rows not in eights cannot be woven: that part stays on ggml's kernel.
    assert [r.gemv for r in layer.routes] == [True, False]
    reference = torch.cat([dequantized(q) for q in (p, part(T.Q5_K, 12, 512, 12))])
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(3))
    out = layer(x)
    assert (out - x @ reference.T).abs().max() <= 3e-2 * out.abs().max()
    with pytest.raises(RuntimeError, match="multiple of 8"):
        torch.ops.astrai.kquant_q5k_weave(p.data[:12])


def test_the_gemv_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("ASTRAI_KQUANT_GEMV", "0")
    assert not gemv_available()
    layer = linear([part(T.Q4_K, 8, 256, 7)], None)
    assert [s.gemv for s in layer.segments] == [False]


@needs_gemv
def test_the_gemv_refuses_what_it_cannot_read():
    q6k = part(T.Q6_K, 8, 256, 8)
    x = torch.randn(2, 256)
    with pytest.raises(RuntimeError, match=r"Q4_K .*, Q5_K .* or Q6_K"):
        torch.ops.astrai.kquant_gemv(x, q6k.data, int(T.Q8_0), 8)
    with pytest.raises(RuntimeError, match="do not hold"):
        torch.ops.astrai.kquant_gemv(torch.randn(2, 512), q6k.data, int(T.Q6_K), 8)
    with pytest.raises(RuntimeError, match="multiple of 8"):
        torch.ops.astrai.kquant_gemv(x, q6k.data[:4], int(T.Q4_K), 4)


@needs_gemv
def test_a_tied_embedding_reads_the_grouped_head_as_ggml_reads_the_file():
    p = part(T.Q6_K, 40, 512, 10)
    head = linear([p], None)
    assert grouped_q6k_head(head)
    embedding = GroupedQ6KEmbedding(head)
    ids = torch.tensor([[3, 39, 0], [7, 7, 12]])
    expected = ggml().rows(p.data, p.type, p.cols, ids.reshape(-1)).view(2, 3, 512)
    assert torch.equal(embedding(ids), expected)
    with pytest.raises(RuntimeError, match="out of range"):
        embedding(torch.tensor([40]))
    assert not grouped_q6k_head(linear([p], None, gemv=False))
