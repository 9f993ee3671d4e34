"""How RoPE is stretched beyond a model's original context (linear, Llama 3, YaRN, LongRoPE),
as a config.json (v4 `rope_scaling` or v5 `rope_parameters`) states it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")


@dataclass(frozen=True)
class RopeScaling:
    """How RoPE frequencies are stretched beyond the trained context ("default" = not at all)."""

    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    # YaRN: the ramp between extrapolated and interpolated frequencies, and the factor cos and
    # sin are scaled by (None: 0.1 ln(factor) + 1, as transformers and llama.cpp default).
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    # LongRoPE (Phi-3/4): each frequency divided by its factor, the short ones for a served
    # context within original_max_position_embeddings, the long ones beyond (as llama.cpp).
    short_factor: tuple[float, ...] = ()
    long_factor: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(
                f"rope_type must be one of {SUPPORTED_ROPE_TYPES}, got {self.rope_type!r}"
            )
        if self.factor <= 0:
            raise ValueError(f"rope factor must be > 0, got {self.factor}")
        if self.rope_type == "longrope" and (
            not self.short_factor or len(self.short_factor) != len(self.long_factor)
        ):
            raise ValueError("longrope needs short_factor and long_factor of one length")


def rope_fields(hf: dict[str, Any]) -> dict[str, Any]:
    """Merge transformers v4 (`rope_theta` + `rope_scaling`) and v5 (`rope_parameters`)."""
    params = dict(hf.get("rope_parameters") or {})
    scaling = dict(hf.get("rope_scaling") or {})
    merged = {**scaling, **params}
    rope_type = merged.get("rope_type") or merged.get("type") or "default"
    if rope_type == "su":  # LongRoPE's first name, in Phi-3's early configs
        rope_type = "longrope"
    fields: dict[str, Any] = {
        "rope_theta": float(merged.get("rope_theta", hf.get("rope_theta", 10000.0))),
        "rope_type": rope_type,
    }
    for name in (
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "attention_factor",
        "partial_rotary_factor",
    ):
        if merged.get(name) is not None:
            fields[name] = merged[name]
    if rope_type in ("yarn", "longrope") and "original_max_position_embeddings" not in fields:
        fields["original_max_position_embeddings"] = hf.get(
            "original_max_position_embeddings", hf.get("max_position_embeddings", 2048)
        )
    if rope_type == "longrope":
        fields["short_factor"] = tuple(float(f) for f in merged.get("short_factor") or ())
        fields["long_factor"] = tuple(float(f) for f in merged.get("long_factor") or ())
        fields.pop("factor", None)
        if fields.get("attention_factor") is None:
            # As transformers: from the trained context over the original one, fixed here so
            # that serving a shorter context keeps the model's own value.
            original = fields["original_max_position_embeddings"]
            stretch = hf.get("max_position_embeddings", original) / original
            fields["attention_factor"] = (
                math.sqrt(1 + math.log(stretch) / math.log(original)) if stretch > 1 else 1.0
            )
    return fields
