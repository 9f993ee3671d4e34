"""BlockLinear and the native block matmuls: float64 reference results for every tile path."""

import pytest
import torch
import torch.nn.functional as F

from tests.worker.kernels.test_layout import q4_1_grid, q8_0_grid
from tests.worker.native import needs_native_kernels
from worker.model.block_linear import BlockLinear, pack_blocks
from worker.model.llama import RMSNorm

pytestmark = needs_native_kernels

GRIDS = {"q4_1": q4_1_grid, "q8_0": q8_0_grid}


def reference(x: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
    out = x.double() @ weight.double().t()
    return out if bias is None else out + bias.double()


def assert_matches(out: torch.Tensor, expected: torch.Tensor) -> None:
    assert out.dtype == torch.float32 and out.shape == expected.shape
    # float32 sums over a few hundred inputs, in another order than float64's.
    scale = expected.abs().max().item()
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5 * scale)


# The direct kernel (panel_rows 0): rows 1-15 take every register tile (AVX2: 4, 3, 2, 1
# rows; AVX-512: 8 down to 1), 70 spans two 64-row passes. The panel kernel (panel_rows 1):
# every remainder of its 6-row (AVX2) or 12-row (AVX-512) tiles. 20 outputs: 3 tiles, the
# last partial (a pair and a lone tile); 36 and 44: a four-tile panel (AVX-512), then a lone
# tile or a pair. 288 inputs: a second 256-input panel.
@pytest.mark.parametrize("panel_rows", [0, 1])
@pytest.mark.parametrize("rows", [*range(1, 16), 24, 70])
@pytest.mark.parametrize("block_format", ["q4_1", "q8_0"])
@pytest.mark.parametrize("outputs", [20, 36, 44])
def test_matches_float64_on_the_weights_the_blocks_hold(
    rows: int, block_format: str, panel_rows: int, outputs: int
):
    weight = GRIDS[block_format](outputs, 288, seed=rows)
    bias = torch.randn(outputs)
    layer = BlockLinear(pack_blocks(weight, block_format), bias, block_format, panel_rows)
    x = torch.randn(rows, 288)
    assert_matches(layer(x), reference(x, weight, bias))


# 2048 inputs: the AVX-512 panel kernel takes its rows in blocks of 120 (~1 MB of
# activations), so 250 rows are three blocks, the last a partial 12-row tile.
@pytest.mark.parametrize("block_format", ["q4_1", "q8_0"])
def test_panel_kernel_rows_in_blocks_match_float64(block_format: str):
    weight = GRIDS[block_format](40, 2048, seed=7)
    layer = BlockLinear(pack_blocks(weight, block_format), None, block_format, 1)
    x = torch.randn(250, 2048)
    assert_matches(layer(x), reference(x, weight))


# 16 outputs: the direct kernel starts its sums from the residual; 20 (a padded last tile): the
# residual is added afterwards. Rows 5 and 70 (two 64-row passes), with and without a bias.
@pytest.mark.parametrize("panel_rows", [0, 1])
@pytest.mark.parametrize("block_format", ["q4_1", "q8_0"])
@pytest.mark.parametrize(
    ("outputs", "rows", "with_bias"), [(16, 5, False), (16, 70, True), (20, 5, True)]
)
def test_norm_gate_and_residual_are_fused_as_a_decoder_layer_applies_them(
    block_format: str, panel_rows: int, outputs: int, rows: int, with_bias: bool
):
    weight = GRIDS[block_format](outputs, 64, seed=3)
    bias = torch.randn(outputs) if with_bias else None
    layer = BlockLinear(pack_blocks(weight, block_format), bias, block_format, panel_rows)
    norm = RMSNorm(64, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(64) + 0.5)
    gate_up, residual = torch.randn(rows, 128) * 3, torch.randn(rows, outputs)

    with torch.inference_mode():
        out = layer(gate_up, residual=residual, norm=norm, gated=True)
        gated = F.silu(gate_up[:, :64]) * gate_up[:, 64:]
        expected = reference(norm(gated), weight, bias) + residual.double()
    assert_matches(out, expected)


def test_inputs_too_small_to_matter_count_as_zero_and_large_ones_keep_their_precision():
    q8 = BlockLinear(pack_blocks(q8_0_grid(8, 32), "q8_0"), None, "q8_0")
    # Scaled for the kernel they would turn subnormal (slow); they are dropped instead.
    assert torch.equal(q8(torch.full((1, 32), 1e-35)), torch.zeros(1, 8))
    weight = q4_1_grid(8, 32)
    q4 = BlockLinear(pack_blocks(weight, "q4_1"), None, "q4_1")
    x = torch.full((1, 32), 1e30)
    torch.testing.assert_close(q4(x).double(), reference(x, weight), rtol=2e-5, atol=0)


def test_bad_shapes_are_refused_with_the_reason():
    layer = BlockLinear(pack_blocks(q4_1_grid(8, 64), "q4_1"), None, "q4_1")
    with pytest.raises(RuntimeError, match="x has 32 columns, the weight takes 64"):
        layer(torch.randn(2, 32))
    with pytest.raises(RuntimeError, match="times 2: gate and up"):
        layer(torch.randn(2, 64), gated=True)
    with pytest.raises(ValueError, match="block_format"):
        pack_blocks(torch.randn(8, 64), "q5_0")


def test_repr_names_the_format():
    layer = BlockLinear(pack_blocks(q8_0_grid(8, 32), "q8_0"), None, "q8_0")
    assert "kind=q8_0" in repr(layer) and "out=8" in repr(layer)
