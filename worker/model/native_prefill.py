"""Prompt chunks through the block kernels with a decoder layer's norms, SwiGLU and residual
adds fused in; attention as the reference's.

Why: between its four matmuls, the reference layer runs RMSNorm twice, SwiGLU and two
residual adds as torch ops over every row of the chunk, a noticeable part of a prefill
forward (docs/BENCHMARKS.md, Figures behind the code). The block kernels apply them in the
pass that prepares their input rows. Used when every linear layer is Q4_1 blocks (the
default path); the arithmetic is the decode step's (worker.model.native_decode), tested
equal to the reference forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from worker.model.batch import ForwardBatch, LayerKV
from worker.model.native_decode import fused_layer

if TYPE_CHECKING:
    from worker.model.block import Block


def prefill_block(
    layer: Block,
    x: torch.Tensor,  # (N, hidden) float32, the residual stream
    cos: torch.Tensor,  # (N, 1, D)
    sin: torch.Tensor,  # (N, 1, D)
    batch: ForwardBatch,
    kv: LayerKV,
) -> torch.Tensor:
    """The layer's output (N, hidden), as Block.forward computes it."""
    return fused_layer(layer, x, lambda qkv: layer.self_attn.attend(qkv, cos, sin, batch, kv))
