"""Output shapes of the native ops for tracing (torch.compile, meta tensors); no computation."""

from __future__ import annotations

import torch


def _linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    out_features: int,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor | None,
    eps: float,
    gated: bool,
    panel_rows: int,
    int8: bool = False,
) -> torch.Tensor:
    return x.new_empty((x.shape[0], out_features))


torch.library.register_fake("astrai::q4_1_linear")(_linear)
torch.library.register_fake("astrai::q8_0_linear")(_linear)
torch.library.register_fake("astrai::q5_0_linear")(_linear)
torch.library.register_fake("astrai::q5_1_linear")(_linear)


@torch.library.register_fake("astrai::silu_mul")
def _silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    return gate_up.new_empty((gate_up.shape[0], gate_up.shape[1] // 2))


@torch.library.register_fake("astrai::rope")
def _rope(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int) -> torch.Tensor:
    return qkv.new_empty((qkv.shape[0], heads, qkv.shape[2]))


@torch.library.register_fake("astrai::decode_attention")
def _decode_attention(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    write_slots: torch.Tensor,
    read_slots: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    window: int,
) -> torch.Tensor:
    return qkv.new_empty((qkv.shape[0], num_heads * k_cache.shape[2]))


@torch.library.register_fake("astrai::prefill_attention")
def _prefill_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, group: int
) -> torch.Tensor:
    return queries.new_empty(queries.shape)


@torch.library.register_fake("astrai::decode_layers")
def _decode_layers(x: torch.Tensor, *args: object) -> torch.Tensor:
    return x.new_empty(x.shape)


@torch.library.register_fake("astrai::kquant_linear")
def _kquant_linear(
    x: torch.Tensor, weight: torch.Tensor, type: int, out_features: int
) -> torch.Tensor:
    return x.new_empty((x.shape[0], out_features), dtype=torch.float32)


@torch.library.register_fake("astrai::kquant_gemv")
def _kquant_gemv(
    x: torch.Tensor, weight: torch.Tensor, type: int, out_features: int
) -> torch.Tensor:
    return x.new_empty((x.shape[0], out_features), dtype=torch.float32)


@torch.library.register_fake("astrai::kquant_tiles")
def _kquant_tiles(
    x: torch.Tensor, weight: torch.Tensor, type: int, out_features: int
) -> torch.Tensor:
    return x.new_empty((x.shape[0], out_features), dtype=torch.float32)


@torch.library.register_fake("astrai::kquant_q6k_group")
def _kquant_q6k_group(weight: torch.Tensor) -> torch.Tensor:
    return weight.new_empty(weight.shape)


@torch.library.register_fake("astrai::kquant_q5k_weave")
def _kquant_q5k_weave(weight: torch.Tensor) -> torch.Tensor:
    return weight.new_empty(weight.shape)


@torch.library.register_fake("astrai::kquant_q6k_grouped_rows")
def _kquant_q6k_grouped_rows(
    weight: torch.Tensor, ids: torch.Tensor, in_features: int
) -> torch.Tensor:
    return weight.new_empty((ids.numel(), in_features), dtype=torch.float32)
