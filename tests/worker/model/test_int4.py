"""Int4Linear: Q4_1-grid weights come back exactly; results track float32 on both paths."""

import pytest
import torch

from worker.model.int4 import GROUP_SIZE, Int4Linear, int4_supported, quantize_groups
from worker.model.linear import FLOAT32_FROM_ROWS, PackedLinear
from worker.model.packing import pack_linear


def q4_1_weight(out_features: int, in_features: int, seed: int = 0) -> torch.Tensor:
    """Weights as a Q4_1 file dequantizes them: d * code + m, each group using codes 0 and 15."""
    generator = torch.Generator().manual_seed(seed)
    groups = in_features // GROUP_SIZE
    codes = torch.randint(0, 16, (out_features, groups, GROUP_SIZE), generator=generator)
    codes[..., 0], codes[..., 1] = 0, 15
    scale = torch.rand(out_features, groups, 1, generator=generator) * 0.01 + 1e-3
    low = -8 * scale + torch.randn(out_features, groups, 1, generator=generator) * 1e-3
    return (codes * scale + low).reshape(out_features, in_features)


def dequantize(codes: torch.Tensor, scale: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    grouped = codes.reshape(*scale.shape, GROUP_SIZE).float()
    return (grouped * scale[..., None] + low[..., None]).reshape(codes.shape)


def test_weights_on_the_q4_1_grid_get_their_codes_back():
    weight = q4_1_weight(32, 64)
    codes, scale, low = quantize_groups(weight)
    assert codes.min() >= 0 and codes.max() <= 15
    torch.testing.assert_close(dequantize(codes, scale, low), weight, rtol=0, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 5, FLOAT32_FROM_ROWS - 1])
def test_kernel_path_matches_the_dequantized_matmul(rows: int):
    weight = q4_1_weight(48, 96, seed=rows)
    bias = torch.randn(48)
    x = torch.randn(rows, 96)
    exact = x @ weight.t() + bias
    out = Int4Linear(weight, bias)(x)
    assert out.dtype == torch.bfloat16 and out.shape == (rows, 48)
    # bf16 activations, scales and output: a few parts in a thousand of the result's size.
    assert ((out.float() - exact).norm() / exact.norm()).item() < 0.01


def test_batches_use_the_float32_copy_exactly():
    weight = torch.randn(32, 64) * 0.05
    x = torch.randn(FLOAT32_FROM_ROWS, 64)
    torch.testing.assert_close(Int4Linear(weight, None)(x), x @ weight.t())


def test_without_the_copy_batches_use_the_kernel_too():
    weight = q4_1_weight(32, 64)
    layer = Int4Linear(weight, None, float32_copy=False)
    x = torch.randn(FLOAT32_FROM_ROWS * 2, 64)
    exact = x @ weight.t()
    assert ((layer(x).float() - exact).norm() / exact.norm()).item() < 0.01
    assert "kind=int4" in repr(layer) and "float32 copy" not in repr(layer)


def test_shapes_the_kernel_cannot_take_stay_packed_floats():
    assert not int4_supported(torch.zeros(16, 40))  # in not a multiple of 32
    assert not int4_supported(torch.zeros(10, 64))  # out not a multiple of 16
    linear = torch.nn.Linear(40, 16)
    assert isinstance(pack_linear(linear, "int4", float32_copy=False), PackedLinear)
    assert isinstance(pack_linear(torch.nn.Linear(64, 32), "int4", False), Int4Linear)


def test_unknown_quantization_is_refused():
    from worker.model.packing import check_quantization

    with pytest.raises(ValueError, match="quantization must be one of"):
        check_quantization("int3")
