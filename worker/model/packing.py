"""Which inference form each linear layer takes: packed float, int8 W8A8 or int4 weight-only."""

from __future__ import annotations

import torch
from torch import nn

from worker.model.int4 import Int4Linear, int4_supported
from worker.model.linear import PackedLinear
from worker.model.quant import Int8Linear

QUANTIZATIONS = ("int8", "int4")
# The linear layers of one block, by their path inside it.
LINEAR_PATHS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


def check_quantization(quantization: str | None) -> None:
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")


def pack_linear(
    linear: nn.Linear,
    quantization: str | None,
    float32_copy: bool,
    float32_weight: torch.Tensor | None = None,
    float32_bias: torch.Tensor | None = None,
) -> nn.Module:
    """The inference module for `linear`; quantized forms start from the float32 weights.

    A layer the int4 kernel cannot take (its shape, or a GPU) stays a PackedLinear.
    """
    device = linear.weight.device
    weight = linear.weight if float32_weight is None else float32_weight.to(device)
    bias = linear.bias if float32_bias is None else float32_bias.to(device)
    if quantization == "int8":
        return Int8Linear(weight, bias)
    if quantization == "int4" and int4_supported(weight):
        return Int4Linear(weight, bias, float32_copy)
    return PackedLinear(linear.weight, linear.bias, float32_copy)
