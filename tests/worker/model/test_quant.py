"""Int8Linear: W8A8 results close to float32, exact where the arithmetic is exact."""

import pytest
import torch

from worker.model.quant import Int8Linear


def test_integer_valued_inputs_come_out_exact():
    # Weights and activations already on the int8 grid: quantization loses nothing.
    weight = torch.tensor([[127.0, -127.0, 0.0, 64.0], [1.0, 2.0, 3.0, 127.0]])
    x = torch.tensor([[127.0, 0.0, -127.0, 127.0], [1.0, 127.0, 0.0, 0.0]])
    layer = Int8Linear(weight, bias=torch.tensor([0.5, -0.5]))
    torch.testing.assert_close(layer(x), x @ weight.t() + torch.tensor([0.5, -0.5]))


@pytest.mark.parametrize("rows", [1, 7, 32])
def test_random_layers_stay_within_a_few_percent(rows: int):
    torch.manual_seed(rows)
    weight = torch.randn(96, 64) * 0.05
    x = torch.randn(rows, 64)
    exact = x @ weight.t()
    error = (Int8Linear(weight, None)(x) - exact).norm() / exact.norm()
    assert error < 0.02


def test_bf16_inputs_are_accepted_and_outputs_are_float32():
    layer = Int8Linear(torch.randn(16, 8), None)
    out = layer(torch.randn(3, 8).to(torch.bfloat16))
    assert out.dtype == torch.float32 and out.shape == (3, 16)
    assert "kind=int8" in repr(layer)


def test_rows_are_scaled_independently():
    weight = torch.randn(8, 8)
    layer = Int8Linear(weight, None)
    small, big = torch.randn(1, 8) * 1e-3, torch.randn(1, 8) * 1e3
    together = layer(torch.cat([small, big]))
    torch.testing.assert_close(together[0:1], layer(small))
    torch.testing.assert_close(together[1:2], layer(big))
