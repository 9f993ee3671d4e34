"""Int4Linear: 4-bit weights in groups of 32 with a scale and a minimum each (as GGUF Q4_1)."""

from __future__ import annotations

import torch
from torch import nn

from worker.model.linear import FLOAT32_FROM_ROWS, PackedLinear

GROUP_SIZE = 32
# torch's CPU int4 kernel packs pairs of 16-column tiles along the input dimension.
_INNER_K_TILES = 2


def int4_supported(weight: torch.Tensor) -> bool:
    """Whether torch's CPU int4 kernel takes this (out, in) weight."""
    out_features, in_features = weight.shape
    return (
        weight.device.type == "cpu"
        and in_features % (_INNER_K_TILES * 16) == 0
        and in_features % GROUP_SIZE == 0
        and out_features % 16 == 0
        and hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")
    )


def quantize_groups(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes 0..15 as int32 (out, in), scale (out, groups), minimum (out, groups)).

    Each group of GROUP_SIZE input weights maps its minimum to code 0 and its maximum to 15,
    as llama.cpp's Q4_1 does, so weights dequantized from a Q4_1 file get their codes back.
    """
    out_features, in_features = weight.shape
    groups = weight.float().reshape(out_features, in_features // GROUP_SIZE, GROUP_SIZE)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scale = ((high - low) / 15).clamp_min(1e-10)
    codes = ((groups - low[..., None]) / scale[..., None]).round_().clamp_(0, 15)
    return codes.to(torch.int32).reshape(out_features, in_features), scale, low


class Int4Linear(nn.Module):
    """Weight-only int4 for the memory-bound few-row steps; float32 for batches.

    One decoding stream reads every weight once per token, so a quarter of bf16's bytes
    makes a faster layer (docs/BENCHMARKS.md, Figures behind the code). From
    FLOAT32_FROM_ROWS rows on, the step is compute bound and the float32 copy is faster than
    the int4 kernel, which unpacks the weights again for every row block.
    """

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, float32_copy: bool = True
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        codes, scale, low = quantize_groups(weight)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, _INNER_K_TILES)
        # The kernel computes (code - 8) * scale + zero, so zero is the group's middle value.
        zero = low + 8 * scale
        self.scales_and_zeros = (
            torch.stack([scale.t(), zero.t()], dim=-1).to(torch.bfloat16).contiguous()
        )  # (groups, out, 2)
        self.bias = None if bias is None else bias.detach().to(torch.bfloat16)
        self.batched = (
            PackedLinear(weight.detach().float(), None if bias is None else bias.float())
            if float32_copy
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, in) → (N, out) bf16 or fp32
        if self.batched is not None and x.shape[0] >= FLOAT32_FROM_ROWS:
            return self.batched(x.float())  # float32, as PackedLinear's batches
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.to(torch.bfloat16), self.packed, GROUP_SIZE, self.scales_and_zeros
        )
        return out if self.bias is None else out.add_(self.bias)

    def extra_repr(self) -> str:
        dual = ", float32 copy" if self.batched is not None else ""
        return f"in={self.in_features}, out={self.out_features}, kind=int4{dual}"
