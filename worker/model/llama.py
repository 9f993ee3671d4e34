"""The decoder (Llama, Mistral, Qwen2/3, SmolLM, Phi-3; Gemma 2/3 with sandwich blocks): MLP,
blocks, packed logits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from worker.kernels.build import native_kernels_available
from worker.kernels.plan import KernelPlan
from worker.model import native_decode
from worker.model.batch import ForwardBatch, LayerKV
from worker.model.block import Block
from worker.model.block_linear import BlockLinear
from worker.model.config import ModelConfig
from worker.model.linear import PackedLinear
from worker.model.native_prefill import prefill_block
from worker.model.norm import RMSNorm
from worker.model.packing import LINEAR_PATHS, block_linear, check_quantization, pack_linear
from worker.model.rope import rope_tables
from worker.model.sandwich_block import SandwichBlock


class ModelOutput(NamedTuple):
    logits: torch.Tensor  # (S, vocab) float32: the rows of batch.logits_index
    hidden: torch.Tensor | None  # (H, hidden) float32: the final norm's, of batch.hidden_index


def _rows(x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
    """The rows of `x` whose logits the batch wants; all of them means every row, in order."""
    if batch.logits_index.shape[0] == x.shape[0]:
        return x
    return x.index_select(0, batch.logits_index)


class LlamaModel(nn.Module):
    """Embedding → blocks → norm → logits of the rows the batch asks for."""

    rope_cos: torch.Tensor  # buffers, (positions, head_dim)
    rope_sin: torch.Tensor
    local_rope_cos: torch.Tensor  # the sliding layers' own, where config.local_rope_theta
    local_rope_sin: torch.Tensor
    weight_paths: str = ""  # which kernel each weight type took, when loaded from a GGUF

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        table = torch.empty(config.vocab_size, config.hidden_size)
        if table.device.type != "meta":  # loading builds on meta and fills the weights in;
            # there normal_ would go through torch._refs and import torch._dynamo.
            nn.init.normal_(table)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, _weight=table)
        block = SandwichBlock if config.sandwich_norms else Block
        self.layers = nn.ModuleList(block(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()
        self._head: nn.Module | None = None  # set by pack_for_inference
        self._head_takes_float32 = True
        # Decode steps through worker.model.native_decode (set by pack_for_inference), with
        # every layer in one native call where native_decode.stack_layers finds them all.
        self.native_decode = False
        self.stacked_layers: native_decode.StackedLayers | None = None
        self.fused_blocks = False  # every layer Q4_1 blocks: prompt chunks with norms fused in
        # Kept in float32 and cast per forward, as the reference does; a second pair for the
        # sliding layers where their RoPE base differs (Gemma 3).
        self.build_rope_tables()

    def build_rope_tables(self, device: torch.device | None = None) -> None:
        """The RoPE tables on `device` (default: the CPU): computed, never loaded, and always
        float32. Computed on the CPU even while the model is built on the meta device, whose
        ops go through torch._refs and import torch._dynamo (docs/bench/HISTORY.md, "Start (tenth
        session, 2026-12-02, same Xeon)")."""
        for local in (False, True):
            if local and self.config.local_rope_theta is None:
                continue
            with torch.device("cpu"):
                tables = rope_tables(self.config, local=local)
            cos, sin = (t.to(device or "cpu") for t in tables)
            prefix = "local_rope" if local else "rope"
            self.register_buffer(f"{prefix}_cos", cos, persistent=False)
            self.register_buffer(f"{prefix}_sin", sin, persistent=False)

    def tie_weights(self) -> None:
        """Share the embedding as the output projection when the config says so."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    @property
    def blocks(self) -> Sequence[Block]:
        """The decoder layers, typed: nn.ModuleList hands out plain modules."""
        return cast(Sequence[Block], self.layers)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype activations compute in: the norms', which every way of loading keeps."""
        return self.norm.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.norm.weight.device

    def forward(
        self,
        input_ids: torch.Tensor,  # (N,)
        batch: ForwardBatch,
        kv_layers: Sequence[LayerKV],
    ) -> torch.Tensor:
        """Logits (S, vocab) in float32 for the rows in `batch.logits_index`."""
        return self._logits(_rows(self.layers_output(input_ids, batch, kv_layers), batch))

    def outputs(
        self, input_ids: torch.Tensor, batch: ForwardBatch, kv_layers: Sequence[LayerKV]
    ) -> ModelOutput:
        """forward's logits, and the final norm's output of the rows in `batch.hidden_index`
        (the hidden states an embedding pools), both from one pass through the layers."""
        x = self.layers_output(input_ids, batch, kv_layers)
        hidden = None
        if batch.hidden_index is not None:
            hidden = self.final_norm(x.index_select(0, batch.hidden_index))
        if not batch.logits_index.numel():  # embeddings alone: no output layer to run
            return ModelOutput(x.new_empty((0, self.config.vocab_size)), hidden)
        return ModelOutput(self._logits(_rows(x, batch)), hidden)

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        """(H, hidden) float32: the final RMSNorm of residual rows, computed in float32 (the
        output layer's input; what transformers' base model returns as last_hidden_state)."""
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.norm.eps)
        return self.norm.weight.float() * normed

    def layers_output(
        self, input_ids: torch.Tensor, batch: ForwardBatch, kv_layers: Sequence[LayerKV]
    ) -> torch.Tensor:
        """(N, hidden) float32: every row's residual stream after the last layer."""
        if native_decode.handles(self, batch, kv_layers):
            return native_decode.layers_output(self, input_ids, batch, kv_layers)
        # The residual stream stays float32 whatever the weights' dtype: 30 layers of bf16
        # rounding in it cost several points of top-1 agreement with the float32 model.
        x = self.embed(input_ids)  # (N, hidden)
        rope = self._rope_rows(self.rope_cos, self.rope_sin, batch.positions)
        local = rope
        if self.config.local_rope_theta is not None:
            local = self._rope_rows(self.local_rope_cos, self.local_rope_sin, batch.positions)
        fused = self.fused_blocks
        for layer, kv in zip(self.blocks, kv_layers, strict=True):
            cos, sin = local if layer.self_attn.window else rope
            x = (
                prefill_block(layer, x, cos, sin, batch, kv)
                if fused
                else layer(x, cos, sin, batch, kv)
            )
        return x

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(N, hidden) float32 embeddings, scaled where the model scales them (Gemma)."""
        x = self.embed_tokens(input_ids).float()
        return x * self.config.embed_scale if self.config.embed_scale != 1.0 else x

    def _rope_rows(
        self, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each token's (N, 1, D) cos and sin, in the activations' dtype."""
        return (
            cos[positions].to(self.dtype).unsqueeze(1),
            sin[positions].to(self.dtype).unsqueeze(1),
        )

    def pack_for_inference(
        self,
        float32_head: torch.Tensor | None = None,
        quantization: str | None = None,
        float32_copy: bool = False,
        float32_weights: Mapping[str, torch.Tensor] | None = None,
        exact_only: bool = False,
        plan: KernelPlan | None = None,
    ) -> None:
        """Swap every linear layer for its inference form (worker.model.packing), once loaded.

        With `float32_head` (the checkpoint's own output weights), a bf16/fp16 model still
        computes the final norm and logits in float32: rounding logits to 8 mantissa bits
        makes near-ties flip the top token. The output layer is never quantized, except to
        Q8_0 blocks under "q4_1" (a Q4_1 GGUF's own output codes are Q8_0).
        `float32_copy` lets bf16/fp16 CPU layers multiply batches in float32 (PackedLinear).
        `float32_weights` (state-dict names → the checkpoint's float32 tensors) are what
        quantization starts from, so int4 recovers a Q4_1 file's codes exactly. With
        `exact_only`, a layer whose weights the blocks would change stays a float layer.
        `plan` is this CPU's measured kernel choice (worker.kernels.plan; default: fixed).
        """
        check_quantization(quantization)
        plan = plan or KernelPlan()
        source = float32_weights or {}
        for i, block in enumerate(self.layers):
            for path in LINEAR_PATHS:
                owner_path, name = path.rsplit(".", 1)
                owner = block.get_submodule(owner_path)
                weight, bias = (source.get(f"layers.{i}.{path}.{k}") for k in ("weight", "bias"))
                packed = pack_linear(
                    getattr(owner, name),
                    quantization,
                    float32_copy,
                    weight,
                    bias,
                    exact_only=exact_only,
                    plan=plan,
                )
                setattr(owner, name, packed)
        head = (self.lm_head.weight if float32_head is None else float32_head.float()).detach()
        head = head.to(self.device)
        blocks = None
        if quantization == "q4_1":
            blocks = block_linear(head, None, "q8_0", exact_only, plan)
        # Blocks and float32 heads take the float32 residual as it is; bf16 heads the norm's.
        self.install_head(
            PackedLinear(head, None, float32_layout=plan.float32_layout)
            if blocks is None
            else blocks,
            takes_float32=blocks is not None or head.dtype == torch.float32,
        )

    def install_head(self, head: nn.Module, takes_float32: bool) -> None:
        """The packed output layer, once every other layer is packed; picks the decode path."""
        self._head = head
        self._head_takes_float32 = takes_float32
        self.native_decode = (
            self.device.type == "cpu"
            and self.dtype == torch.float32
            and self.config.llama_layers
            and native_kernels_available()
        )
        self.stacked_layers = native_decode.stack_layers(self) if self.native_decode else None
        self.fused_blocks = self.native_decode and native_decode.all_q4_1_blocks(self)

    @property
    def decode_path(self) -> str:
        """How a decode step runs its layers here, as install_head decided (the startup line)."""
        if self.stacked_layers is not None:
            return "every layer in one native call"
        if self.native_decode:
            return "native kernels, five calls per layer"
        return "torch operators per layer"

    def _logits(self, x: torch.Tensor) -> torch.Tensor:  # (S, hidden) float32
        logits = self._head_logits(x)
        cap = self.config.final_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def _head_logits(self, x: torch.Tensor) -> torch.Tensor:
        if self._head is None:
            return self.lm_head(self.norm(x)).float()
        if isinstance(self._head, BlockLinear):
            return self._head(x, norm=self.norm)
        if self._head_takes_float32:
            normed = F.rms_norm(x, (x.shape[-1],), eps=self.norm.eps)
            return self._head(self.norm.weight.float() * normed)
        return self._head(self.norm(x)).float()
