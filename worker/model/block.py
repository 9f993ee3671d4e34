"""One decoder layer of Llama's shape: pre-norm attention and pre-norm gated MLP, residuals."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from worker.model.attention import Attention
from worker.model.batch import ForwardBatch, LayerKV
from worker.model.config import ModelConfig
from worker.model.norm import RMSNorm


class MLP(nn.Module):
    """down(act(gate) * up): SwiGLU (silu) or GeGLU (GELU's tanh form, Gemma)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.intermediate = config.intermediate_size
        self.gelu = config.hidden_act == "gelu_tanh"
        # gate and up projections fused into one matmul.
        self.gate_up_proj = nn.Linear(
            config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias
        )
        self.down_proj = nn.Linear(
            config.intermediate_size, config.hidden_size, bias=config.mlp_bias
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)
        act = F.gelu(gate, approximate="tanh") if self.gelu else F.silu(gate)
        return self.down_proj(act * up)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        batch: ForwardBatch,
        kv: LayerKV,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, batch, kv)
        return x + self.mlp(self.post_attention_layernorm(x))
