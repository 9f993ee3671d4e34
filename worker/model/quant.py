"""Int8Linear: int8 weights (per output channel) times int8 activations (per token)."""

from __future__ import annotations

import torch
from torch import nn


class Int8Linear(nn.Module):
    """W8A8: x is quantized per row to int8 on the fly, multiplied by int8 weights in int32.

    On a CPU with a dot-product instruction the int8 GEMM beats float32 on batches
    (docs/BENCHMARKS.md, Figures behind the code). The price is accuracy: every activation
    row keeps only 8 bits relative to its largest value, so it is an option, never the
    default.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        w = weight.detach().float()
        self.in_features = w.shape[1]
        self.out_features = w.shape[0]
        self.weight_scale = (w.abs().amax(dim=1) / 127).clamp_min(1e-12)  # (out,)
        quantized = (w / self.weight_scale[:, None]).round_().clamp_(-127, 127).to(torch.int8)
        # (in, out) with columns contiguous: the layout torch._int_mm is fastest with.
        self.weight = quantized.contiguous().t()
        self.bias = None if bias is None else bias.detach().float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, in) → (N, out) float32
        x = x.float()
        scale = x.abs().amax(dim=1, keepdim=True).clamp_min_(1e-12).div_(127)  # (N, 1)
        quantized = (x / scale).round_().to(torch.int8)
        out = torch._int_mm(quantized, self.weight).float().mul_(scale).mul_(self.weight_scale)
        return out if self.bias is None else out.add_(self.bias)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, kind=int8"
