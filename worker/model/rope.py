"""Rotary position embeddings as pure functions: frequency tables and their application."""

from __future__ import annotations

import math

import torch

from worker.model.config import ModelConfig, RopeScaling


def inverse_frequencies(head_dim: int, theta: float, scaling: RopeScaling) -> torch.Tensor:
    """(head_dim / 2,) float32 inverse frequencies, stretched as the rope type says."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
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
    """What cos and sin are multiplied by: YaRN's softmax temperature fix, 1 otherwise."""
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


def rope_tables(config: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables, each (max_positions, head_dim) float32, halves duplicated."""
    inv_freq = inverse_frequencies(config.head_dim, config.rope_theta, config.rope_scaling)
    positions = torch.arange(config.max_position_embeddings, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq)  # (P, D/2)
    angles = torch.cat((angles, angles), dim=-1)  # (P, D)
    scale = attention_factor(config.rope_scaling)
    return angles.cos() * scale, angles.sin() * scale


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (N, heads, D) by per-token (N, 1, D) cos/sin, rotate-half convention."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
