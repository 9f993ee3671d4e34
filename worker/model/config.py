"""Model configuration of the decoders we serve (Llama family, Qwen3, Gemma 2/3, Phi-3), from
a config.json dict."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from worker.model.rope_scaling import RopeScaling, rope_fields

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3")
GEMMA_TYPES = ("gemma2", "gemma3_text")
ACTIVATIONS = ("silu", "gelu_tanh")
LAYER_TYPES = ("sliding_attention", "full_attention")
# transformers' names of the activations we compute, by what config.json says.
_ACTIVATION_NAMES = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and numerics of one Llama-family decoder."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3: an RMSNorm over each head of q and k, before RoPE
    sliding_window: int | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    hidden_act: str = "silu"  # the MLP's gate: silu (SwiGLU) or gelu_tanh (GeGLU, Gemma)
    # Per layer, sliding_attention or full_attention (Gemma); () = every layer as
    # sliding_window says (Mistral: all slide; Llama: none does).
    layer_types: tuple[str, ...] = ()
    local_rope_theta: float | None = None  # sliding layers' RoPE base (Gemma 3); None = same
    query_scale: float | None = None  # q·k scale (Gemma: query_pre_attn_scalar^-0.5); None = D^-0.5
    attn_softcap: float | None = None  # Gemma 2: scores → cap * tanh(scores / cap)
    final_softcap: float | None = None  # Gemma 2: logits → cap * tanh(logits / cap)
    embed_scale: float = 1.0  # Gemma: embeddings times sqrt(hidden_size)
    sandwich_norms: bool = False  # Gemma: attention and MLP outputs normalised too
    rotary_dim: int | None = None  # Phi-3/4: RoPE over the first rotary_dim dims of each head

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"model_type must be one of {SUPPORTED_MODEL_TYPES}, got {self.model_type!r}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act must be one of {ACTIVATIONS}, got {self.hidden_act!r}")
        if self.layer_types and len(self.layer_types) != self.num_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries for {self.num_layers} layers"
            )
        unknown = set(self.layer_types) - set(LAYER_TYPES)
        if unknown:
            raise ValueError(f"layer_types must be among {LAYER_TYPES}, got {sorted(unknown)}")
        if self.rotary_dim is not None and not (
            0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0
        ):
            raise ValueError(
                f"rotary_dim must be even and within head_dim {self.head_dim}, "
                f"got {self.rotary_dim}"
            )
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")

    @property
    def kv_group_size(self) -> int:
        return self.num_heads // self.num_kv_heads

    def layer_window(self, layer: int) -> int | None:
        """The sliding window layer `layer` attends within (None: the whole context)."""
        if self.layer_types and self.layer_types[layer] == "full_attention":
            return None
        return self.sliding_window

    @property
    def norm_offset(self) -> float:
        """What a checkpoint's RMSNorm weights lack: Gemma stores w and scales by 1 + w."""
        return 1.0 if self.model_type in GEMMA_TYPES else 0.0

    @property
    def mask_window(self) -> int | None:
        """The window every layer shares, applied to a forward's mask (None: none shared)."""
        return None if self.layer_types else self.sliding_window

    @property
    def has_mixed_windows(self) -> bool:
        """Some layers slide and others see the whole context: a forward needs both masks."""
        windows = {self.layer_window(i) for i in range(self.num_layers)}
        return len(windows) > 1

    @property
    def llama_layers(self) -> bool:
        """Layers of Llama's shape (SwiGLU, two norms, plain attention and logits): what the
        native decode and fused prefill kernels compute."""
        return (
            self.hidden_act == "silu"
            and not self.sandwich_norms
            and self.attn_softcap is None
            and self.final_softcap is None
            and self.embed_scale == 1.0
            and self.query_scale is None
        )

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> ModelConfig:
        """Read a transformers config dict (v4 `rope_scaling` or v5 `rope_parameters`)."""
        model_type = hf.get("model_type", "llama")
        if model_type == "gemma3":  # the multimodal wrapper: its text model is what we serve
            model_type, hf = "gemma3_text", {**hf.get("text_config", {}), **_shared_ids(hf)}
        gemma = model_type in GEMMA_TYPES
        activation = hf.get("hidden_activation" if gemma else "hidden_act") or hf.get(
            "hidden_act", "silu"
        )
        if activation not in _ACTIVATION_NAMES:
            raise ValueError(
                f"hidden_act must be one of {sorted(_ACTIVATION_NAMES)}, got {activation!r}"
            )
        num_heads = hf["num_attention_heads"]
        head_dim = hf.get("head_dim") or hf["hidden_size"] // num_heads
        rope_parameters = hf.get("rope_parameters") or {}
        local_theta = None
        if "full_attention" in rope_parameters:  # Gemma 3: one RoPE per layer type
            local = rope_parameters.get("sliding_attention") or {}
            local_theta = float(local.get("rope_theta", hf.get("rope_local_base_freq", 1e4)))
            hf = {**hf, "rope_parameters": rope_parameters["full_attention"]}
        elif model_type == "gemma3_text":
            local_theta = float(hf.get("rope_local_base_freq", 1e4))
        rope = rope_fields(hf)
        rotary = rope.pop("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
        rotary_dim = int(head_dim * rotary) if rotary != 1.0 else None
        eos = hf.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        sliding = hf.get("sliding_window")
        if model_type in ("qwen2", "qwen3") and not hf.get("use_sliding_window", False):
            sliding = None
        attention_bias = bool(hf.get("attention_bias", False))
        layer_types = tuple(hf.get("layer_types") or ())
        if gemma and not layer_types and sliding is not None:
            layer_types = _sliding_pattern(
                hf["num_hidden_layers"], 2 if model_type == "gemma2" else 6
            )
        query_scalar = hf.get("query_pre_attn_scalar") if gemma else None
        return cls(
            model_type=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=head_dim,
            max_position_embeddings=hf.get("max_position_embeddings", 2048),
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=rope.pop("rope_theta"),
            rope_scaling=RopeScaling(**rope),
            tie_word_embeddings=hf.get("tie_word_embeddings", False),
            # Qwen2 always carries q/k/v biases; the others only when attention_bias is set.
            qkv_bias=model_type == "qwen2" or attention_bias,
            o_bias=model_type != "qwen2" and attention_bias,
            mlp_bias=bool(hf.get("mlp_bias", False)),
            qk_norm=model_type in ("qwen3", "gemma3_text"),
            sliding_window=sliding,
            bos_token_id=hf.get("bos_token_id"),
            eos_token_ids=eos_ids,
            hidden_act=_ACTIVATION_NAMES[activation],
            layer_types=layer_types if sliding is not None else (),
            local_rope_theta=local_theta,
            query_scale=None if query_scalar is None else float(query_scalar) ** -0.5,
            attn_softcap=hf.get("attn_logit_softcapping") if gemma else None,
            final_softcap=hf.get("final_logit_softcapping") if gemma else None,
            embed_scale=float(hf["hidden_size"]) ** 0.5 if gemma else 1.0,
            sandwich_norms=gemma,
            rotary_dim=rotary_dim,
        )


def _sliding_pattern(num_layers: int, period: int) -> tuple[str, ...]:
    """Gemma's layer types: every `period`-th layer attends to the whole context."""
    return tuple(
        "full_attention" if (i + 1) % period == 0 else "sliding_attention"
        for i in range(num_layers)
    )


def _shared_ids(hf: dict[str, Any]) -> dict[str, Any]:
    """Token ids a multimodal wrapper config keeps at its top level."""
    return {k: hf[k] for k in ("bos_token_id", "eos_token_id") if k in hf}


def with_context(
    config: ModelConfig, max_model_len: int | None, rope_scaling: str | None
) -> ModelConfig:
    """The config serving `max_model_len` tokens: RoPE stretched by `rope_scaling` (linear or
    yarn) when that is beyond the trained context, refused beyond it without.

    Why refuse: positions past the trained context rotate by angles the model never saw, and
    its output degrades without warning; a stretched RoPE is a choice the user makes knowingly.
    """
    trained = config.max_position_embeddings
    if max_model_len is None or max_model_len <= trained:
        if rope_scaling is not None and max_model_len is None:
            raise ValueError(
                f"--rope-scaling {rope_scaling} needs --max-model-len above the model's "
                f"trained context ({trained} tokens) to know how far to stretch"
            )
        if max_model_len is not None and config.rope_scaling.rope_type == "longrope":
            # LongRoPE's factors follow the context served: the short ones within the original.
            return replace(config, max_position_embeddings=max_model_len)
        return config
    if rope_scaling is None:
        raise ValueError(
            f"--max-model-len {max_model_len} is beyond the model's trained context of "
            f"{trained} tokens; add --rope-scaling linear or yarn to stretch RoPE that far, "
            f"or ask for at most {trained}"
        )
    if config.rope_scaling.rope_type != "default":
        raise ValueError(
            f"the model already scales RoPE ({config.rope_scaling.rope_type}, trained "
            f"context {trained}); --rope-scaling applies to models without scaling"
        )
    scaling = RopeScaling(
        rope_type=rope_scaling,
        factor=max_model_len / trained,
        original_max_position_embeddings=trained,
    )
    return replace(config, rope_scaling=scaling, max_position_embeddings=max_model_len)
