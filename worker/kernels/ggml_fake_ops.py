"""Output shapes of the ggml ops for tracing (torch.compile, meta tensors); no computation."""

from __future__ import annotations

import torch


@torch.library.register_fake("astrai_ggml::linear")
def _linear(
    x: torch.Tensor,
    weights: list[torch.Tensor],
    types: list[int],
    out_features: list[int],
    woven: list[int],
    bias: torch.Tensor | None,
) -> torch.Tensor:
    return x.new_empty((x.shape[0], sum(out_features)), dtype=torch.float32)


@torch.library.register_fake("astrai_ggml::rows")
def _rows(weight: torch.Tensor, type: int, in_features: int, ids: torch.Tensor) -> torch.Tensor:
    return weight.new_empty((ids.numel(), in_features), dtype=torch.float32)
