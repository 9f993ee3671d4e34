"""PackedLinear: same results as nn.Linear in every layout it picks."""

import pytest
import torch
from torch import nn

from worker.model.linear import PackedLinear


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 7, 32])
def test_float32_matches_nn_linear(bias: bool, rows: int):
    torch.manual_seed(rows)
    linear = nn.Linear(24, 40, bias=bias)
    packed = PackedLinear.from_linear(linear)
    x = torch.randn(rows, 24)
    assert packed.kind == "mm"
    torch.testing.assert_close(packed(x), linear(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 32])
def test_half_precision_matches_nn_linear(dtype: torch.dtype, rows: int):
    torch.manual_seed(0)
    linear = nn.Linear(64, 48, bias=True).to(dtype)
    packed = PackedLinear.from_linear(linear)
    x = torch.randn(rows, 64).to(dtype)
    assert packed.kind in ("mkldnn", "linear")
    torch.testing.assert_close(packed(x).float(), linear(x).float(), rtol=2e-2, atol=2e-2)


def test_weights_are_detached_copies_in_the_packed_layout():
    linear = nn.Linear(8, 16)
    packed = PackedLinear.from_linear(linear)
    assert packed.weight.shape == (8, 16)  # float32: stored transposed for x @ w_t
    assert not packed.weight.requires_grad
    assert "kind=mm" in repr(packed)
