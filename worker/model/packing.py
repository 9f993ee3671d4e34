"""Which inference form each linear layer takes: packed float, int8 W8A8, int4 or GGUF blocks."""

from __future__ import annotations

import torch
from torch import nn

from worker.kernels.plan import KernelPlan
from worker.model.block_linear import BlockLinear, pack_blocks
from worker.model.int4 import Int4Linear, int4_supported
from worker.model.linear import PackedLinear
from worker.model.quant import Int8Linear
from worker.model.quantizations import QUANTIZATIONS

# The linear layers of one block, by their path inside it.
LINEAR_PATHS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


def check_quantization(quantization: str | None) -> None:
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")


def block_linear(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    block_format: str,
    exact_only: bool,
    plan: KernelPlan,
) -> BlockLinear | None:
    """The weight as blocks; None when `exact_only` and the blocks would change its values."""
    packed = pack_blocks(weight, block_format)
    if exact_only and not torch.equal(packed.dequantized, weight.float()):
        return None
    return BlockLinear(packed, bias, block_format, plan.panel_rows)


def pack_linear(
    linear: nn.Linear,
    quantization: str | None,
    float32_copy: bool,
    float32_weight: torch.Tensor | None = None,
    float32_bias: torch.Tensor | None = None,
    exact_only: bool = False,
    plan: KernelPlan | None = None,
) -> nn.Module:
    """The inference module for `linear`; quantized forms start from the float32 weights.

    A layer the int4 kernel cannot take (its shape, or a GPU) stays a PackedLinear, as does a
    q4_1 layer whose weights are not on a Q4_1 grid when `exact_only` asks for lossless only.
    """
    plan = plan or KernelPlan()
    device = linear.weight.device
    weight = linear.weight if float32_weight is None else float32_weight.to(device)
    bias = linear.bias if float32_bias is None else float32_bias.to(device)
    if quantization == "int8":
        return Int8Linear(weight, bias)
    if quantization == "int4" and int4_supported(weight):
        return Int4Linear(weight, bias, float32_copy)
    if quantization == "q4_1":
        packed = block_linear(weight, bias, "q4_1", exact_only, plan)
        if packed is not None:
            return packed
    return PackedLinear(linear.weight, linear.bias, float32_copy, plan.float32_layout)
