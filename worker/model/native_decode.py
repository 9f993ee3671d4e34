"""The decode step through the native CPU kernels: fused attention, SwiGLU and residual adds.

Same arithmetic as LlamaModel's reference forward (tested equal), in five native calls per
layer, or one for all layers when every linear layer is Q4_1 blocks, instead of ~40 torch ops
per layer: at one decoding row the reference spent more time dispatching small ops from
Python than multiplying. Used for forwards in which every sequence feeds exactly one token
into a float32 or float16 cache on the CPU; everything else takes the reference path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

from worker.model.batch import ForwardBatch, LayerKV
from worker.model.block_linear import BlockLinear
from worker.model.config import ModelConfig

if TYPE_CHECKING:
    from worker.model.block import Block
    from worker.model.norm import RMSNorm


class NativeModel(Protocol):
    """What this path reads of a LlamaModel (which imports this module, so not by name)."""

    config: ModelConfig
    native_decode: bool
    stacked_blocks: tuple[list[torch.Tensor | None], ...] | None
    embed_tokens: nn.Embedding
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    @property
    def blocks(self) -> Sequence[Block]: ...

    def _logits(self, x: torch.Tensor) -> torch.Tensor: ...


def handles(model: NativeModel, batch: ForwardBatch, kv_layers: Sequence[LayerKV]) -> bool:
    return (
        model.native_decode
        and batch.max_query_len == 1
        and batch.query_index is None
        and batch.in_place is None
        and kv_layers[0][0].dtype in (torch.float32, torch.float16)
    )


def forward(
    model: NativeModel, input_ids: torch.Tensor, batch: ForwardBatch, kv_layers: Sequence[LayerKV]
) -> torch.Tensor:
    """Logits (S, vocab) float32 for the rows in `batch.logits_index`, as LlamaModel.forward."""
    x = model.embed_tokens(input_ids)  # (B, hidden) float32
    rope = (model.rope_cos, model.rope_sin)
    weights = model.stacked_blocks
    if weights is not None:  # every layer in blocks: the whole stack in one native call
        x = torch.ops.astrai.decode_layers(
            x,
            *weights,
            [k for k, _ in kv_layers],
            [v for _, v in kv_layers],
            batch.positions,
            *rope,
            batch.write_slots,
            batch.read_slots,
            model.config.num_heads,
            model.config.num_kv_heads,
            model.config.sliding_window or 0,
            model.config.rms_norm_eps,
            cast(BlockLinear, model.blocks[0].mlp.down_proj).panel_rows,
        )
    else:
        for layer, kv in zip(model.blocks, kv_layers, strict=True):
            x = _block(layer, x, batch, kv, rope)
    if batch.logits_index.shape[0] != x.shape[0]:  # all rows wanted means every row, in order
        x = x.index_select(0, batch.logits_index)
    return model._logits(x)


def _linears(model: NativeModel) -> list[tuple[nn.Module, ...]]:
    return [
        (b.self_attn.qkv_proj, b.self_attn.o_proj, b.mlp.gate_up_proj, b.mlp.down_proj)
        for b in model.blocks
    ]


def all_q4_1_blocks(model: NativeModel) -> bool:
    """Whether every linear layer is Q4_1 blocks (the fused prefill layers apply then)."""
    return all(
        isinstance(linear, BlockLinear) and linear.block_format == "q4_1"
        for group in _linears(model)
        for linear in group
    )


def stack_blocks(model: NativeModel) -> tuple[list[torch.Tensor | None], ...] | None:
    """The per-layer weights astrai::decode_layers takes (records, norms, biases), when every
    linear layer is Q4_1 blocks, the norms share the config's eps and the model has no q/k
    norms (the one-call stack has none); else None."""
    layers = model.blocks
    linears = _linears(model)
    norms = [(b.input_layernorm, b.post_attention_layernorm) for b in layers]
    eligible = all_q4_1_blocks(model) and not model.config.qk_norm
    if not eligible or any(n.eps != model.config.rms_norm_eps for pair in norms for n in pair):
        return None
    blocks = cast(list[tuple[BlockLinear, ...]], linears)
    records: list[list[torch.Tensor | None]] = [[g[i].records for g in blocks] for i in range(4)]
    return (
        *records,
        [pair[0].weight.float() for pair in norms],
        [pair[1].weight.float() for pair in norms],
        *([group[i].bias for group in blocks] for i in range(4)),
    )


def _block(
    layer: Block,
    x: torch.Tensor,
    batch: ForwardBatch,
    kv: LayerKV,
    rope: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    attn = layer.self_attn
    k_cache, v_cache = kv

    def attend(qkv: torch.Tensor) -> torch.Tensor:
        return torch.ops.astrai.decode_attention(
            attn.prepared_qkv(qkv),
            batch.positions,
            *rope,
            k_cache,
            v_cache,
            batch.write_slots,
            batch.read_slots,
            attn.num_heads,
            attn.num_kv_heads,
            attn.window,
        )

    return fused_layer(layer, x, attend)


def fused_layer(
    layer: Block, x: torch.Tensor, attend: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """One decoder layer over the residual stream x (N, hidden) float32, its norms, SwiGLU and
    residual adds fused into the linear layers; `attend` maps the projected qkv to the heads."""
    attn, mlp = layer.self_attn, layer.mlp
    qkv = fused_linear(attn.qkv_proj, x, norm=layer.input_layernorm)
    x = fused_linear(attn.o_proj, attend(qkv), residual=x)
    gate_up = fused_linear(mlp.gate_up_proj, x, norm=layer.post_attention_layernorm)
    return fused_linear(mlp.down_proj, gate_up, residual=x, gated=True)


def fused_linear(
    linear: nn.Module,
    x: torch.Tensor,
    *,
    norm: RMSNorm | None = None,
    residual: torch.Tensor | None = None,
    gated: bool = False,
) -> torch.Tensor:
    """residual + linear(norm(gate(x))) in float32, all fused where the layer is blocks."""
    if isinstance(linear, BlockLinear):
        return linear(x, residual=residual, norm=norm, gated=gated)
    if gated:
        x = torch.ops.astrai.silu_mul(x.float())
    if norm is not None:
        x = norm.weight * F.rms_norm(x, (x.shape[-1],), eps=norm.eps)
    out = linear(x).float()  # free for float32 layers; int4 ones give bf16 for few rows
    return out if residual is None else residual + out
