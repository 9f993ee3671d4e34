"""GGUF names and metadata in Hugging Face terms; read_gguf, the gguf package's own reading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

# GGUF architecture name → transformers model_type.
ARCHITECTURES = {
    "llama": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma2": "gemma2",
    "gemma3": "gemma3_text",
    "phi3": "phi3",
}
# Gemma's four norms a layer: llama.cpp's ffn_norm is the MLP's input norm, as in Llama, but
# transformers calls it pre_feedforward_layernorm (its post_attention_layernorm normalises the
# attention's output).
_GEMMA_TENSORS = {
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
# Per architecture, GGUF block tensor names that differ from BLOCK_TENSORS' meaning.
ARCH_BLOCK_TENSORS: dict[str, dict[str, str]] = {
    "gemma2": _GEMMA_TENSORS,
    "gemma3": _GEMMA_TENSORS,
    # Phi-3 stores q/k/v and gate/up fused, in transformers' order.
    "phi3": {
        "attn_qkv.weight": "self_attn.qkv_proj.weight",
        "ffn_up.weight": "mlp.gate_up_proj.weight",
    },
}
# Gemma's layers of every `period`-th index attend to the whole context (llama.cpp's default
# sliding window pattern when the file states none).
_SLIDING_PERIOD = {"gemma2": 2, "gemma3": 6}
# The 27 B Gemmas scale queries by (hidden / heads)^-0.5, the others by head_dim^-0.5
# (llama.cpp tells them apart by their layer count).
_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}

# Per-block GGUF tensor names → Hugging Face names (after `model.layers.{i}.`).
BLOCK_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
# LongRoPE's per-frequency factors (Phi-3/4): part of the config, not weights.
ROPE_FACTOR_TENSORS = {
    "rope_factors_long.weight": "long_factor",
    "rope_factors_short.weight": "short_factor",
}
TOP_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    # A reranker's classifier over the last token's final-norm row (llama.cpp's converter
    # writes Qwen3-Reranker's yes and no rows so): transformers' ...ForSequenceClassification
    # calls it score. Read by worker/model/score_head.py, never by the decoder.
    "cls.output.weight": "score.weight",
}


def read_gguf(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(config dict as transformers writes config.json, state dict with HF tensor names), all
    through GGUFReader: slow on large vocabularies, so serving reads through
    worker.model.gguf_tensors; this is the tests' independent check of that."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(str(path))
    config = config_from_reader(reader)
    arch = str(reader.fields["general.architecture"].contents())
    state: dict[str, torch.Tensor] = {}
    factors = {}
    for tensor in reader.tensors:
        if tensor.name in ROPE_FACTOR_TENSORS:
            factors[ROPE_FACTOR_TENSORS[tensor.name]] = [float(f) for f in tensor.data]
            continue
        name = hf_name(tensor.name, arch)
        # dequantize returns the logical shape with GGUF's dimension order already reversed.
        values = dequantize(tensor.data, tensor.tensor_type)
        state[name] = torch.from_numpy(np.array(values, dtype=np.float32, order="C"))
    if factors:
        add_longrope(config, config_meta(reader), factors)
    config["vocab_size"] = int(state["model.embed_tokens.weight"].shape[0])
    config["tie_word_embeddings"] = "lm_head.weight" not in state
    if arch == "llama":
        _unpermute_qk(state, config)
    if arch in _GEMMA_TENSORS_ARCHS:
        for name in state:
            if name.endswith("norm.weight"):
                state[name] = state[name] - 1.0
    return config, state


# llama.cpp's converter stores Gemma's RMSNorm weights as 1 + w; Hugging Face names hold w.
_GEMMA_TENSORS_ARCHS = ("gemma2", "gemma3")


def config_from_reader(reader: Any) -> dict[str, Any]:
    """The config dict of an open GGUFReader's metadata (vocab size and tying not included)."""
    return config_from_metadata(config_meta(reader))


def config_meta(reader: Any) -> dict[str, Any]:
    return {name: field.contents() for name, field in reader.fields.items()}


def add_longrope(config: dict[str, Any], meta: dict[str, Any], factors: dict[str, Any]) -> None:
    """LongRoPE's scaling (Phi-3/4) from its factor tensors and the file's keys, as a
    config.json's rope_scaling holds it."""
    arch = meta["general.architecture"]
    config["rope_scaling"] = {
        "rope_type": "longrope",
        **factors,
        "original_max_position_embeddings": int(
            meta.get(f"{arch}.rope.scaling.original_context_length")
            or config["max_position_embeddings"]
        ),
        "attention_factor": meta.get(f"{arch}.rope.scaling.attn_factor"),
    }


def config_from_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """The config dict of a GGUF's metadata keys (vocab size and tying not included)."""
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"GGUF architecture must be one of {sorted(ARCHITECTURES)}, got {arch!r}")
    for name in ("attention.head_count", "embedding_length", "block_count", "feed_forward_length"):
        if meta.get(f"{arch}.{name}") is None:
            raise ValueError(f"GGUF metadata lacks {arch}.{name}")
    return _config_from_metadata(meta, arch)


def _config_from_metadata(meta: dict[str, Any], arch: str) -> dict[str, Any]:
    def key(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    num_heads = int(key("attention.head_count"))
    hidden = int(key("embedding_length"))
    # Phi-3's rope.dimension_count is its partial rotary dimension, not the head's.
    rotary_default = hidden // num_heads if arch == "phi3" else key("rope.dimension_count")
    head_dim = int(key("attention.key_length") or rotary_default or hidden // num_heads)
    config: dict[str, Any] = {
        "model_type": ARCHITECTURES[arch],
        "hidden_size": hidden,
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": num_heads,
        "num_key_value_heads": int(key("attention.head_count_kv", num_heads)),
        "head_dim": head_dim,
        "max_position_embeddings": int(key("context_length", 2048)),
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(key("rope.freq_base", 10000.0)),
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": meta.get("tokenizer.ggml.padding_token_id"),
    }
    eot = meta.get("tokenizer.ggml.eot_token_id")
    if eot is not None and eot != config["eos_token_id"]:
        # llama.cpp ends generation at end-of-turn too (Llama 3's <|eot_id|>, Gemma's
        # <end_of_turn>), as transformers' generation_config lists both.
        eos = config["eos_token_id"]
        config["eos_token_id"] = [eot] if eos is None else [eos, eot]
    if arch in _SLIDING_PERIOD:
        _gemma_fields(config, meta, arch)
    if arch == "phi3":
        rotary = key("rope.dimension_count", head_dim)
        if rotary != head_dim:
            config["partial_rotary_factor"] = rotary / head_dim
    if arch in ("mistral", "phi3") and key("attention.sliding_window"):
        config["sliding_window"] = int(key("attention.sliding_window"))
    scaling = key("rope.scaling.type")
    if scaling == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": key("rope.scaling.factor")}
    elif scaling == "yarn":
        config["rope_scaling"] = {
            "rope_type": "yarn",
            "factor": key("rope.scaling.factor"),
            "original_max_position_embeddings": key(
                "rope.scaling.original_context_length", config["max_position_embeddings"]
            ),
        }
    return config


def _gemma_fields(config: dict[str, Any], meta: dict[str, Any], arch: str) -> None:
    """Gemma 2/3's config.json fields from a GGUF's keys and llama.cpp's defaults for them."""

    def key(name: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{name}", default)

    layers = config["num_hidden_layers"]
    config["hidden_activation"] = "gelu_pytorch_tanh"
    window = key("attention.sliding_window", 4096 if arch == "gemma2" else None)
    if window:
        config["sliding_window"] = int(window)
        pattern = key("attention.sliding_window_pattern", _SLIDING_PERIOD[arch])
        if isinstance(pattern, list):  # one flag per layer: True = sliding
            config["layer_types"] = [
                "sliding_attention" if flag else "full_attention" for flag in pattern
            ]
        else:
            config["layer_types"] = [
                "full_attention" if (i + 1) % int(pattern) == 0 else "sliding_attention"
                for i in range(layers)
            ]
    big = layers == _GEMMA_27B_LAYERS[arch]
    config["query_pre_attn_scalar"] = (
        config["hidden_size"] // config["num_attention_heads"] if big else config["head_dim"]
    )
    config["attn_logit_softcapping"] = key("attn_logit_softcapping")
    config["final_logit_softcapping"] = key("final_logit_softcapping")
    if arch == "gemma3":
        config["rope_local_base_freq"] = float(key("rope.freq_base_swa", 10000.0))


def hf_name(gguf_name: str, arch: str = "llama") -> str:
    """The Hugging Face name of a GGUF tensor (`blk.3.attn_q.weight` → `model.layers.3.…`)
    in architecture `arch` (GGUF's name for it)."""
    if gguf_name in TOP_TENSORS:
        return TOP_TENSORS[gguf_name]
    prefix, _, rest = gguf_name.partition(".")
    block, _, tensor = rest.partition(".")
    names = {**BLOCK_TENSORS, **ARCH_BLOCK_TENSORS.get(arch, {})}
    if prefix != "blk" or tensor not in names or not block.isdigit():
        raise ValueError(f"unknown GGUF tensor {gguf_name!r}")
    return f"model.layers.{int(block)}.{names[tensor]}"


def gemma_norm_shift(arch: str) -> float:
    """What llama.cpp added to a GGUF's RMSNorm weights of architecture `arch`."""
    return 1.0 if arch in _GEMMA_TENSORS_ARCHS else 0.0


def _unpermute_qk(state: dict[str, torch.Tensor], config: dict[str, Any]) -> None:
    """Undo llama.cpp's interleaving of q/k rows, back to the rotate-half RoPE layout.

    llama.cpp's converter reshapes each head's rows as (2, D/2) and swaps them to (D/2, 2)
    so that RoPE can rotate adjacent pairs; the inverse swaps them back.
    """
    for name, tensor in state.items():
        heads = qk_heads(name, config)
        if heads:
            state[name] = tensor.index_select(0, unpermute_rows(tensor.shape[0], heads))


def qk_heads(name: str, config: dict[str, Any]) -> int:
    """How many heads a q or k projection of a llama GGUF has (its rows interleaved), else 0."""
    if ".self_attn.q_proj." in name:
        return int(config["num_attention_heads"])
    if ".self_attn.k_proj." in name:
        return int(config["num_key_value_heads"])
    return 0


def unpermute_rows(rows: int, num_heads: int) -> torch.Tensor:
    """Row order that undoes the interleaving: each head's rows (D/2, 2) back to (2, D/2)."""
    order = torch.arange(rows).reshape(num_heads, rows // num_heads // 2, 2)
    return order.transpose(1, 2).reshape(-1)
