"""Gemma's decoder layer: attention and MLP outputs normalised too, before their residual adds."""

from __future__ import annotations

import torch

from worker.model.batch import ForwardBatch, LayerKV
from worker.model.block import Block
from worker.model.config import ModelConfig
from worker.model.norm import RMSNorm


class SandwichBlock(Block):
    """x + post_attn_norm(attn(input_norm(x))), then x + post_ffw_norm(mlp(pre_ffw_norm(x))).

    Named as transformers names Gemma's norms: here `post_attention_layernorm` normalises the
    attention's output (in a Block it is the MLP's input norm). The native kernels compute
    Blocks only (ModelConfig.llama_layers), so these layers always take this forward.
    """

    def __init__(self, config: ModelConfig, layer: int = 0) -> None:
        super().__init__(config, layer)
        self.pre_feedforward_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_feedforward_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        batch: ForwardBatch,
        kv: LayerKV,
    ) -> torch.Tensor:
        attended = self.self_attn(self.input_layernorm(x), cos, sin, batch, kv)
        x = x + self.post_attention_layernorm(attended)
        mlp_out = self.mlp(self.pre_feedforward_layernorm(x))
        return x + self.post_feedforward_layernorm(mlp_out)
