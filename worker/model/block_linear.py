"""BlockLinear: a linear layer of GGUF-style block weights (Q4_1, Q8_0, Q5_*) in our kernels."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from worker.kernels.layout import BlockRecords, BlockWeights, pack_q4_1, pack_q8_0

if TYPE_CHECKING:
    from worker.model.norm import RMSNorm

BLOCK_FORMATS = ("q4_1", "q8_0")
# Rows from which the panel kernel beats the direct one, until the probe measures this CPU.
DEFAULT_PANEL_ROWS = 16
_PACKERS = {"q4_1": pack_q4_1, "q8_0": pack_q8_0}


def pack_blocks(weight: torch.Tensor, block_format: str) -> BlockWeights:
    if block_format not in _PACKERS:
        raise ValueError(f"block_format must be one of {BLOCK_FORMATS}, got {block_format!r}")
    return _PACKERS[block_format](weight)


class BlockLinear(nn.Module):
    """x (float32, quantized per block of 32 on the fly) times block-quantized weights.

    Built from weights a GGUF file dequantized, it multiplies with the file's own codes; one
    decoding row reads 5/8 (Q4_1) or 17/16 (Q8_0) bytes per weight instead of float32's 4.
    """

    def __init__(
        self,
        packed: BlockWeights | BlockRecords,
        bias: torch.Tensor | None,
        block_format: str,
        panel_rows: int = DEFAULT_PANEL_ROWS,
        int8: bool = False,
    ) -> None:
        super().__init__()
        self.panel_rows = panel_rows  # from this many rows on, the panel kernel
        # Every row count on 8-bit activations (a GGUF's own arithmetic, as ggml computes it)
        # instead of float32 ones.
        self.int8 = int8
        self.block_format = block_format
        self.records = packed.records
        self.out_features = packed.out_features
        self.in_features = packed.records.shape[1] * 32
        self.bias = None if bias is None else bias.detach().float().contiguous()
        ops = torch.ops.astrai
        ops_by_format = {  # Q5_0 and Q5_1: 8-bit activations only
            "q4_1": ops.q4_1_linear,
            "q8_0": ops.q8_0_linear,
            "q5_0": ops.q5_0_linear,
            "q5_1": ops.q5_1_linear,
        }
        self._op = ops_by_format[block_format].default

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None = None,
        norm: RMSNorm | None = None,
        gated: bool = False,
    ) -> torch.Tensor:
        """(N, in) → (N, out) float32; fused: `x` first gated (x = [gate | up], (N, 2 in):
        silu(gate) * up), then normalized by `norm`; `residual` (N, out) added at the end."""
        norm_weight, eps = (None, 0.0) if norm is None else (norm.weight, norm.eps)
        return self._op(
            x.float(),
            self.records,
            self.out_features,
            self.bias,
            residual,
            norm_weight,
            eps,
            gated,
            self.panel_rows,
            self.int8,
        )

    def extra_repr(self) -> str:
        activations = "8-bit" if self.int8 else "float32"
        return (
            f"in={self.in_features}, out={self.out_features}, kind={self.block_format}, "
            f"{activations} activations"
        )
