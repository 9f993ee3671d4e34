"""The decode step through the native CPU kernels: fused attention, SwiGLU and residual adds.

Same arithmetic as LlamaModel's reference forward (tested equal), in five native calls per
layer, or one for all layers when every linear layer is blocks or a GGUF's codes on ggml's
kernels (and our gemv), instead of ~40 torch ops per layer: at one decoding row the
reference spent more time dispatching small ops from Python than multiplying. Used for
forwards in which every sequence feeds exactly one token into a float32, float16 or q8_0
cache on the CPU; everything else takes the reference path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from worker.kv.kv_rows import Q8_0
from worker.model.batch import ForwardBatch, LayerKV
from worker.model.block_linear import BlockLinear
from worker.model.config import ModelConfig
from worker.model.ggml_linear import GgmlLinear

if TYPE_CHECKING:
    from worker.model.block import Block
    from worker.model.norm import RMSNorm


class NativeModel(Protocol):
    """What this path reads of a LlamaModel (which imports this module, so not by name)."""

    config: ModelConfig
    native_decode: bool
    stacked_layers: StackedLayers | None
    embed_tokens: nn.Embedding
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    @property
    def blocks(self) -> Sequence[Block]: ...


def handles(model: NativeModel, batch: ForwardBatch, kv_layers: Sequence[LayerKV]) -> bool:
    return (
        model.native_decode
        and batch.max_query_len == 1
        and batch.query_index is None
        and batch.seq_lengths is None  # prompt tokens take the prefill's arithmetic
        and batch.in_place is None
        and kv_layers[0][0].dtype in (torch.float32, torch.float16, Q8_0)
    )


def layers_output(
    model: NativeModel, input_ids: torch.Tensor, batch: ForwardBatch, kv_layers: Sequence[LayerKV]
) -> torch.Tensor:
    """(B, hidden) float32: every row's residual stream after the last layer, before the
    final norm, as LlamaModel.layers_output computes it."""
    x = model.embed_tokens(input_ids)  # (B, hidden) float32
    rope = (model.rope_cos, model.rope_sin)
    stack = model.stacked_layers
    if stack is not None and (stack.max_rows is None or x.shape[0] < stack.max_rows):
        x = torch.ops.astrai.decode_layers(
            x,
            stack.weights,
            stack.parts,
            stack.input_norms,
            stack.post_norms,
            stack.biases,
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
            stack.panel_rows,
        )
    else:
        for layer, kv in zip(model.blocks, kv_layers, strict=True):
            x = _block(layer, x, batch, kv, rope)
    return x


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


class StackedLayers(NamedTuple):
    """What astrai::decode_layers takes to run every layer in one call: each linear layer's
    weights and, five integers per weight, what computes it (csrc/decode_layers.cpp)."""

    weights: list[torch.Tensor]
    parts: list[int]  # per weight: linear index, kind, ggml type, out_features, woven
    input_norms: list[torch.Tensor]
    post_norms: list[torch.Tensor]
    biases: list[torch.Tensor | None]  # four per layer: qkv, o, gate_up, down
    panel_rows: int  # the block kernels' panel rows (0: no block layers)
    max_rows: int | None  # from this many rows on, a ggml layer's panels: not in one call


# csrc/decode_layers.cpp's PartKind.
_Q4_1_RECORDS, _Q8_0_RECORDS, _GGML, _KQUANT_GEMV = range(4)
_RECORDS_INT8 = {"q4_1": 4, "q8_0": 5, "q5_0": 6, "q5_1": 7}


def stack_layers(model: NativeModel) -> StackedLayers | None:
    """The one-call stack, when every linear layer is blocks (Q4_1, Q8_0) or a GGUF's codes
    on ggml's kernels and our gemv, the norms share the config's eps and the model has no
    q/k norms (the one-call stack has none); else None."""
    if model.config.qk_norm:
        return None
    norms = [(b.input_layernorm, b.post_attention_layernorm) for b in model.blocks]
    if any(n.eps != model.config.rms_norm_eps for pair in norms for n in pair):
        return None
    weights: list[torch.Tensor] = []
    parts: list[int] = []
    biases: list[torch.Tensor | None] = []
    panel_rows, panel_from = 0, []
    for index, linear in enumerate(group for layer in _linears(model) for group in layer):
        if isinstance(linear, BlockLinear):
            if linear.int8:
                kind = _RECORDS_INT8[linear.block_format]
            else:
                kind = _Q4_1_RECORDS if linear.block_format == "q4_1" else _Q8_0_RECORDS
            weights.append(linear.records)
            parts += [index, kind, 0, linear.out_features, 0]
            panel_rows = linear.panel_rows
        elif isinstance(linear, GgmlLinear):
            for weight, fields in _ggml_parts(linear):
                weights.append(weight)
                parts += [index, *fields]
            if linear.panel_from:
                panel_from.append(linear.panel_from)
        else:
            return None
        biases.append(linear.bias)
    return StackedLayers(
        weights,
        parts,
        [pair[0].weight.float() for pair in norms],
        [pair[1].weight.float() for pair in norms],
        biases,
        panel_rows,
        min(panel_from) if panel_from else None,
    )


def _ggml_parts(linear: GgmlLinear) -> list[tuple[torch.Tensor, tuple[int, int, int, int]]]:
    """A GgmlLinear's weights in its forward's order: a gemv segment as one weight (its last
    field the rows from which the tile unit takes it), each of ggml's parts as its own
    (consecutive ones are multiplied in one call)."""
    found = []
    for segment in linear.segments:
        if segment.gemv:
            weight = segment.weight
            fields = (_KQUANT_GEMV, segment.type, weight.shape[0], segment.tiles_from)
            found.append((weight, fields))
            continue
        first, last = segment.parts
        for i in range(first, last):
            fields = (_GGML, linear.types[i], linear.part_rows[i], linear.woven[i])
            found.append((linear.weights[i], fields))
    return found


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
