"""Our block kernels on 8-bit activations (and Q4_0 as Q5_0): ggml's arithmetic, its bytes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from tests.worker.native import needs_ggml, needs_native_kernels
from worker.kernels.layout import (
    GGUF_BLOCK_BYTES,
    five_bit_codes,
    q5_0_blocks_from_q4_0,
    q8_0_blocks_from_q5_0,
    records_from_gguf,
)
from worker.model.block_linear import BlockLinear
from worker.model.norm import RMSNorm

pytestmark = [needs_native_kernels, needs_ggml]

# Rows across the kernel's runs (of four, seven, eight rows) and their remainders; widths of
# one block and more; outputs of one tile and of several (in fours, pairs and one alone: 7
# tiles), and one that ends in a partial tile.
ROWS = [1, 2, 3, 4, 5, 7, 8, 13, 15, 17, 64]
SHAPES = [(8, 32), (40, 96), (56, 64), (64, 576), (20, 128)]
KINDS = {"q4_1": T.Q4_1, "q8_0": T.Q8_0, "q5_0": T.Q5_0, "q5_1": T.Q5_1}


def ggml():
    return torch.ops.astrai_ggml


def layer(
    block_format: str, out: int, k: int, seed: int, int8: bool
) -> tuple[BlockLinear, torch.Tensor]:
    """A block layer of random weights, and the same weights as ggml's rows of the file."""
    kind = int(KINDS[block_format])
    weight = torch.randn(out, k, generator=torch.Generator().manual_seed(seed))
    rows = ggml().quantize(weight, kind)
    linear = BlockLinear(records_from_gguf(rows, block_format), None, block_format, 16, int8)
    return linear, rows


def ggml_product(x: torch.Tensor, rows: torch.Tensor, block_format: str) -> torch.Tensor:
    kind = int(KINDS[block_format])
    return ggml().linear(x, [rows], [kind], [rows.shape[0]], [0], None)


@pytest.mark.parametrize("block_format", ["q4_1", "q8_0"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_kernel_computes_what_ggml_computes_on_the_same_bytes(block_format, shape):
    out, k = shape
    ours_layer, rows = layer(block_format, out, k, seed=out + k, int8=True)
    float_layer, _ = layer(block_format, out, k, seed=out + k, int8=False)
    for count in ROWS:
        x = torch.randn(count, k, generator=torch.Generator().manual_seed(count))
        ours, theirs = ours_layer(x), ggml_product(x, rows, block_format)
        scale = theirs.abs().max()
        # Both round the activations to 8 bits per block (scales through fp16, as ggml stores
        # them) and multiply integers: equal but for the order of float additions.
        assert (ours - theirs).abs().max() <= 2e-6 * scale, count
        # The float32 kernel is not what ran: it differs by the activations' rounding.
        assert (float_layer(x) - theirs).abs().max() > 20 * (ours - theirs).abs().max(), count


@pytest.mark.parametrize("block_format", list(KINDS))
def test_a_row_gets_the_same_bits_alone_as_among_many(block_format):
    """A decode step's row (read from the records as they lie) and a prompt chunk's (several
    tiles at once, unpacked beforehand) go through the same operations in the same order."""
    linear, _ = layer(block_format, 56, 576, seed=3, int8=True)
    x = torch.randn(64, 576, generator=torch.Generator().manual_seed(4))
    together = linear(x)
    assert torch.equal(together, torch.cat([linear(x[i : i + 1]) for i in range(64)]))


@pytest.mark.parametrize("block_format", ["q5_0", "q5_1"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_5_bit_records_compute_what_ggml_computes_on_the_file_s_bytes(block_format, shape):
    """The file's blocks (22 bytes for Q5_0, 24 for Q5_1), widened in registers: the same
    integer dot products as ggml's Q5_0 x Q8_0 / Q5_1 x Q8_1; for Q5_0, bit for bit what our
    Q8_0 kernel computes on the codes widened in memory."""
    out, k = shape
    ours_layer, rows = layer(block_format, out, k, seed=out + k, int8=True)
    assert ours_layer.records.shape[2] == 8 * GGUF_BLOCK_BYTES[block_format]
    codes = five_bit_codes(rows.view(out, k // 32, -1), block_format)
    assert codes.min() == 0 and codes.max() == 31  # both ends of the 5-bit range
    q8_layer = None
    if block_format == "q5_0":
        widened = records_from_gguf(q8_0_blocks_from_q5_0(rows), "q8_0")
        q8_layer = BlockLinear(widened, None, "q8_0", 16, True)
    for count in ROWS:
        x = torch.randn(count, k, generator=torch.Generator().manual_seed(count))
        ours, theirs = ours_layer(x), ggml_product(x, rows, block_format)
        assert (ours - theirs).abs().max() <= 2e-6 * theirs.abs().max(), count
        assert q8_layer is None or torch.equal(ours, q8_layer(x)), count


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_q4_0_as_q5_0_records_computes_what_ggml_computes_on_the_file_s_bytes(shape):
    """Q4_0's codes plus 8 as Q5_0 blocks: the same values (ggml dequantizes both alike) and
    ggml's Q4_0 x Q8_0 integer sums, within the order of float additions."""
    out, k = shape
    weight = torch.randn(out, k, generator=torch.Generator().manual_seed(out + k))
    rows = ggml().quantize(weight, int(T.Q4_0))
    as_q5_0 = q5_0_blocks_from_q4_0(rows)
    assert torch.equal(
        torch.from_numpy(dequantize(as_q5_0.numpy(), T.Q5_0)),
        torch.from_numpy(dequantize(rows.numpy(), T.Q4_0)),
    )
    linear = BlockLinear(records_from_gguf(as_q5_0, "q5_0"), None, "q5_0", 16, True)
    for count in ROWS:
        x = torch.randn(count, k, generator=torch.Generator().manual_seed(count))
        theirs = ggml().linear(x, [rows], [int(T.Q4_0)], [out], [0], None)
        assert (linear(x) - theirs).abs().max() <= 2e-6 * theirs.abs().max(), count


@pytest.mark.parametrize("block_format", ["q5_0", "q5_1"])
def test_5_bit_records_refuse_float32_activations(block_format):
    linear, _ = layer(block_format, 8, 32, 0, int8=True)
    linear.int8 = False
    with pytest.raises(RuntimeError, match="Q5_0 and Q5_1 records take 8-bit activations only"):
        linear(torch.randn(1, 32))


@pytest.mark.parametrize("block_format", ["q4_1", "q8_0", "q5_0", "q5_1"])
def test_norm_gate_bias_and_residual_are_fused_around_it(block_format):
    out, k, count = 48, 256, 6
    linear, rows = layer(block_format, out, k, seed=9, int8=True)
    linear.bias = torch.randn(out)
    gen = torch.Generator().manual_seed(3)
    gate_up, residual = (
        torch.randn(count, 2 * k, generator=gen),
        torch.randn(count, out, generator=gen),
    )
    norm = RMSNorm(k, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(k, generator=gen) + 0.5)
        prologue = F.silu(gate_up[:, :k]) * gate_up[:, k:]
        prologue = norm.weight * F.rms_norm(prologue, (k,), eps=1e-5)
        expected = ggml_product(prologue, rows, block_format) + linear.bias + residual
        ours = linear(gate_up, residual=residual, norm=norm, gated=True)
    # The prologue's float rounding may move an activation across a rounding boundary.
    assert (ours - expected).abs().max() <= 1e-3 * expected.abs().max()


def test_the_layer_says_which_activations_it_takes():
    assert "8-bit activations" in repr(layer("q4_1", 8, 32, 0, int8=True)[0])
    assert "float32 activations" in repr(layer("q4_1", 8, 32, 0, int8=False)[0])
