"""Rotary position embeddings as pure functions: frequency tables and their application."""

from __future__ import annotations

import math

import torch

from worker.model.config import ModelConfig
from worker.model.rope_scaling import RopeScaling


def inverse_frequencies(
    head_dim: int, theta: float, scaling: RopeScaling, context: int = 0
) -> torch.Tensor:
    """(head_dim / 2,) float32 inverse frequencies, stretched as the rope type says (LongRoPE:
    by its long factors when the `context` served exceeds the original one)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    if scaling.rope_type == "longrope":
        long = context > scaling.original_max_position_embeddings
        factors = torch.tensor(scaling.long_factor if long else scaling.short_factor)
        if factors.numel() != head_dim // 2:
            raise ValueError(
                f"longrope has {factors.numel()} factors for {head_dim // 2} frequencies"
            )
        return 1.0 / (factors * theta**exponents)
    inv_freq = 1.0 / (theta**exponents)
    if scaling.rope_type == "linear":
        return inv_freq / scaling.factor
    if scaling.rope_type == "llama3":
        return _llama3_frequencies(inv_freq, scaling)
    if scaling.rope_type == "yarn":
        return _yarn_frequencies(inv_freq, head_dim, theta, scaling)
    return inv_freq


def _yarn_frequencies(
    inv_freq: torch.Tensor, head_dim: int, theta: float, s: RopeScaling
) -> torch.Tensor:
    """YaRN: frequencies that turn fewer than `beta_slow` times over the trained context are
    interpolated (divided by `factor`), those that turn more than `beta_fast` times kept, a
    linear ramp between."""

    def dimension(rotations: float) -> float:
        ratio = s.original_max_position_embeddings / (rotations * 2 * math.pi)
        return head_dim * math.log(ratio) / (2 * math.log(theta))

    low = max(math.floor(dimension(s.beta_fast)), 0)
    high = min(math.ceil(dimension(s.beta_slow)), head_dim - 1)
    span = high - low if high != low else 0.001
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / span).clamp(0, 1)
    kept = 1 - ramp  # 1: extrapolated (the trained frequency), 0: interpolated
    return inv_freq / s.factor * (1 - kept) + inv_freq * kept


def attention_factor(scaling: RopeScaling) -> float:
    """What cos and sin are multiplied by: YaRN's and LongRoPE's softmax temperature fix, 1
    otherwise."""
    if scaling.rope_type == "longrope":
        return scaling.attention_factor or 1.0
    if scaling.rope_type != "yarn":
        return 1.0
    if scaling.attention_factor is not None:
        return scaling.attention_factor
    return 0.1 * math.log(scaling.factor) + 1.0 if scaling.factor > 1 else 1.0


def _llama3_frequencies(inv_freq: torch.Tensor, s: RopeScaling) -> torch.Tensor:
    """Llama 3.1: long wavelengths divided by `factor`, short ones kept, a smooth ramp between."""
    old_len = s.original_max_position_embeddings
    low_freq_wavelen = old_len / s.low_freq_factor
    high_freq_wavelen = old_len / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_tables(config: ModelConfig, local: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables, each (max_positions, head_dim) float32, halves duplicated.

    `local`: the sliding layers' tables where they have a RoPE base of their own (Gemma 3:
    unscaled, `local_rope_theta`). With a partial rotary dimension R < D, the first R/2
    frequencies of each half turn and the rest are 0 (cos 1, sin 0: those dims pass through);
    the loader orders q and k rows to match (partial_rotary_order).
    """
    theta, scaling = config.rope_theta, config.rope_scaling
    if local and config.local_rope_theta is not None:
        theta, scaling = config.local_rope_theta, RopeScaling()
    rotary = config.rotary_dim or config.head_dim
    inv_freq = inverse_frequencies(rotary, theta, scaling, config.max_position_embeddings)
    inv_freq = torch.cat([inv_freq, inv_freq.new_zeros((config.head_dim - rotary) // 2)])
    positions = torch.arange(config.max_position_embeddings, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq)  # (P, D/2)
    angles = torch.cat((angles, angles), dim=-1)  # (P, D)
    scale = attention_factor(scaling)
    cos, sin = angles.cos(), angles.sin()
    if rotary < config.head_dim and scale != 1.0:  # the pass-through dims are not scaled
        turning = torch.cat([inv_freq != 0, inv_freq != 0])
        return torch.where(turning, cos * scale, cos), torch.where(turning, sin * scale, sin)
    return cos * scale, sin * scale


def partial_rotary_order(head_dim: int, rotary_dim: int) -> torch.Tensor:
    """(head_dim,) the order of one head's q/k dims under which rotate-half over the whole
    head rotates only the first `rotary_dim` (Phi-3's partial rotary): rotated pairs (i,
    i + R/2) land at (i, i + D/2), the pass-through dims fill the rest of each half.

    q and k of a head are reordered alike, so their dot product is unchanged."""
    half, pass_half = rotary_dim // 2, (head_dim - rotary_dim) // 2
    first = [*range(half), *range(rotary_dim, rotary_dim + pass_half)]
    second = [*range(half, rotary_dim), *range(rotary_dim + pass_half, head_dim)]
    return torch.tensor(first + second)


def qkv_row_order(config: ModelConfig) -> torch.Tensor | None:
    """The fused q/k/v projection's row order for a partial rotary dimension, else None."""
    if config.rotary_dim is None or config.rotary_dim == config.head_dim:
        return None
    d = config.head_dim
    head = partial_rotary_order(d, config.rotary_dim)
    qk_heads = config.num_heads + config.num_kv_heads
    order = [h * d + head for h in range(qk_heads)]
    order.append(torch.arange(qk_heads * d, (qk_heads + config.num_kv_heads) * d))
    return torch.cat(order)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (N, heads, D) by per-token (N, 1, D) cos/sin, rotate-half convention."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
