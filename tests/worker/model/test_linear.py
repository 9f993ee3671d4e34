"""PackedLinear: same results as nn.Linear in every layout it picks."""

import pytest
import torch
from torch import nn

from worker.kernels.plan import FLOAT32_LAYOUTS
from worker.model.linear import FLOAT32_FROM_ROWS, PackedLinear, mkldnn_linear_supports


@pytest.mark.parametrize("layout", FLOAT32_LAYOUTS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 7, 32])
def test_float32_matches_nn_linear_in_every_layout(bias: bool, rows: int, layout: str):
    if layout == "mkldnn" and not mkldnn_linear_supports(torch.float32):
        pytest.skip("this torch build has no oneDNN packed linear")
    torch.manual_seed(rows)
    linear = nn.Linear(24, 40, bias=bias)
    packed = PackedLinear(linear.weight, linear.bias, float32_layout=layout)
    x = torch.randn(rows, 24)
    assert packed.kind == layout
    with torch.inference_mode():
        torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 32])
def test_half_precision_matches_nn_linear(dtype: torch.dtype, rows: int):
    """oneDNN's packed path where the CPU has it (AVX-512 BW/VL/DQ or AVX-NE-CONVERT),
    F.linear elsewhere: the layer works on every x86-64 CPU, the packed kind only on some."""
    torch.manual_seed(0)
    linear = nn.Linear(64, 48, bias=True).to(dtype)
    packed = PackedLinear.from_linear(linear)
    x = torch.randn(rows, 64).to(dtype)
    assert packed.kind == ("mkldnn" if mkldnn_linear_supports(dtype) else "linear")
    torch.testing.assert_close(packed(x).float(), linear(x).float(), rtol=2e-2, atol=2e-2)


def test_weights_are_detached_copies_in_the_packed_layout():
    linear = nn.Linear(8, 16)
    packed = PackedLinear.from_linear(linear)
    assert packed.weight.shape == (8, 16)  # float32: stored transposed for x @ w_t
    assert not packed.weight.requires_grad
    assert "kind=mm" in repr(packed)


@pytest.mark.parametrize("rows", [1, 15, 16, 64])
def test_bf16_layer_with_a_float32_copy_matches_on_both_sides_of_the_threshold(rows: int):
    torch.manual_seed(rows)
    linear = nn.Linear(64, 48, bias=True).to(torch.bfloat16)
    packed = PackedLinear(linear.weight, linear.bias, float32_copy=True)
    x = torch.randn(rows, 64).to(torch.bfloat16)
    out = packed(x)
    # Batches take the float32 path and stay float32 for the layers after it.
    assert out.dtype == (torch.float32 if rows >= FLOAT32_FROM_ROWS else torch.bfloat16)
    torch.testing.assert_close(out.float(), linear(x).float(), rtol=2e-2, atol=2e-2)
    assert "float32 copy" in repr(packed)


def test_float32_copy_is_ignored_for_float32_layers():
    packed = PackedLinear(torch.randn(4, 8), None, float32_copy=True)
    assert packed.weight_f32 is None and packed.kind == "mm"
