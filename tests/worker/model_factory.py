"""Test helpers: tiny random-weight transformers models and hand-built ForwardBatches.

The cache is a plain contiguous one: k and v are float32 zeros of shape
(num_layers, rows, kv_heads, head_dim), and sequence s owns rows [s*max_len, (s+1)*max_len).
Batches are built the way the engine must build them: packed new tokens, flat cache slots,
and a (B, 1, Q*G, T) mask whose row q*G + g is query q of the g-th head of a kv group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from worker.model.batch import ForwardBatch, LayerKV
from worker.model.config import ModelConfig
from worker.model.llama import LlamaModel
from worker.model.loader import load_model

VOCAB = 256
MAX_LEN = 64  # cache rows per sequence

_SMALL: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# One config dict per supported architecture; together they cover G = 1, 2, 3 and 4 heads per
# kv head, every rope type, q/k/v/o/mlp biases and tied embeddings.
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "llama": {**_SMALL, "model_type": "llama", "num_key_value_heads": 4},
    "llama3_rope": {
        **_SMALL,
        "model_type": "llama",
        # original_max_position_embeddings is small so the scaling bends the frequencies that
        # matter over the ~20 positions the tests use.
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    },
    # YaRN (what --rope-scaling yarn sets): the ramp and the attention factor of cos and sin.
    "yarn_rope": {
        **_SMALL,
        "model_type": "llama",
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    },
    # Linear rope via the v4 `rope_scaling` key; also every optional Llama bias.
    "linear_rope": {
        **_SMALL,
        "model_type": "llama",
        "rope_scaling": {"rope_type": "linear", "factor": 4.0},
        "attention_bias": True,
        "mlp_bias": True,
    },
    # Every test sequence is shorter than the window: our model applies whatever mask the
    # caller builds, so sliding is exercised only where a test builds a windowed mask.
    "mistral": {**_SMALL, "model_type": "mistral", "num_key_value_heads": 1, "sliding_window": 48},
    "qwen2": {**_SMALL, "model_type": "qwen2", "rope_parameters": {"rope_theta": 1e6}},
    # Qwen3: no q/k/v biases, an RMSNorm over each q and k head before RoPE.
    "qwen3": {**_SMALL, "model_type": "qwen3", "rope_parameters": {"rope_theta": 1e6}},
    # Gemma 2: GeGLU, four norms a layer stored as w (scaled by 1 + w), embeddings scaled by
    # sqrt(hidden), a query scale of its own, soft-capped attention scores and logits, and
    # a sliding layer (window 8, shorter than the tests' sequences) before a full one.
    "gemma2": {
        **_SMALL,
        "model_type": "gemma2",
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": 24,
        "sliding_window": 8,
        "attn_logit_softcapping": 4.0,
        "final_logit_softcapping": 6.0,
        "tie_word_embeddings": True,
    },
    # Gemma 3 (text): Gemma 2 without soft caps, with q/k norms, and a RoPE per layer type:
    # the sliding layers' own base, the full layers' scaled linearly.
    "gemma3": {
        **_SMALL,
        "model_type": "gemma3_text",
        "hidden_activation": "gelu_pytorch_tanh",
        "query_pre_attn_scalar": 16,
        "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
        "tie_word_embeddings": True,
    },
    # Phi-3/4: q/k/v and gate/up fused in the checkpoint, RoPE over half of each head.
    "phi3": {
        **_SMALL,
        "model_type": "phi3",
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1e4,
            "partial_rotary_factor": 0.5,
        },
        "pad_token_id": 0,
    },
    # SmolLM-like: tied embeddings, 6 heads on 2 kv heads, head_dim implied by hidden / heads.
    "smollm": {
        **{k: v for k, v in _SMALL.items() if k != "head_dim"},
        "model_type": "llama",
        "hidden_size": 96,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_theta": 100000.0},
    },
}

# The architectures whose layers have Llama's shape, which the native decode and fused
# prefill kernels compute; Gemma's sandwich layers always take the reference forward.
LLAMA_LAYER_ARCHITECTURES = [a for a in ARCHITECTURES if a not in ("gemma2", "gemma3")]


def hf_model(arch: str, seed: int = 0, **overrides: Any) -> PreTrainedModel:
    """A float32 eval-mode transformers model with random weights large enough to matter."""
    spec = {**ARCHITECTURES[arch], **overrides}
    config = AutoConfig.for_model(**spec)
    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation="eager"
    )
    # The default init (std 0.02) leaves attention nearly uniform and logits near zero, which
    # would hide mask and rope mistakes; norms stay near 1 so activations stay near unit scale.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * noise)
            else:
                param.copy_(0.125 * noise)
    return model.eval()


def save_hf(model: PreTrainedModel, folder: Path, max_shard_size: str | None = None) -> Path:
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(folder, safe_serialization=True, **kwargs)
    return folder


def model_pair(
    arch: str, folder: Path, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, LlamaModel]:
    """(transformers model, ours loaded from its saved folder)."""
    hf = hf_model(arch)
    save_hf(hf, folder)
    return hf, load_model(folder, dtype, torch.device("cpu"))


def transformers_generate(
    hf: PreTrainedModel, prompt_ids: list[int], max_new_tokens: int, pad_token_id: int = 0
) -> list[int]:
    """The new token ids of transformers' own greedy `generate` after `prompt_ids`."""
    with torch.inference_mode():
        out = hf.generate(
            torch.tensor([prompt_ids]),
            attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad_token_id,
        )
    return list(out[0, len(prompt_ids) :].tolist())


def transformers_generate_batch(
    hf: PreTrainedModel, prompts: list[list[int]], max_new_tokens: int, pad_token_id: int
) -> list[list[int]]:
    """transformers' own greedy `generate` for every prompt in one left-padded batch (its
    weights read once a step for all of them), each cut after its first end-of-text token as
    `generate` on the prompt alone stops there."""
    width = max(len(ids) for ids in prompts)
    padded = [[pad_token_id] * (width - len(ids)) + ids for ids in prompts]
    mask = [[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts]
    with torch.inference_mode():
        out = hf.generate(
            torch.tensor(padded),
            attention_mask=torch.tensor(mask),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad_token_id,
        )
    eos = hf.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [eos])
    rows = []
    for row in out[:, width:].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in stops), len(row))
        rows.append(row[:end])
    return rows


def random_tokens(length: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (length,), generator=gen).tolist()


def reference_logits(hf: PreTrainedModel, tokens: list[int]) -> torch.Tensor:
    """(len, vocab) float32 logits of transformers on the whole sequence."""
    with torch.inference_mode():
        return hf(torch.tensor([tokens])).logits[0].float()


def tiny_config(**overrides: Any) -> ModelConfig:
    """A one-layer config of the smallest shapes, for tests of the numbers it derives."""
    fields: dict[str, Any] = {
        "model_type": "llama",
        "vocab_size": 8,
        "hidden_size": 8,
        "intermediate_size": 8,
        "num_layers": 1,
        "num_heads": 2,
        "num_kv_heads": 1,
        "head_dim": 4,
        "max_position_embeddings": 8,
        "rope_theta": 10000.0,
    }
    return ModelConfig(**{**fields, **overrides})


# --- cache and batches ----------------------------------------------------------------------


@dataclass(frozen=True)
class Cache:
    k: torch.Tensor  # (L, rows, KVH, D)
    v: torch.Tensor

    def layers(self) -> list[LayerKV]:
        return [(self.k[i], self.v[i]) for i in range(self.k.shape[0])]


def new_cache(config: ModelConfig, num_seqs: int, max_len: int = MAX_LEN) -> Cache:
    shape = (config.num_layers, num_seqs * max_len, config.num_kv_heads, config.head_dim)
    return Cache(torch.zeros(shape), torch.zeros(shape))


@dataclass(frozen=True)
class Chunk:
    """New tokens of sequence `seq`, the first at position `start` (= tokens already cached)."""

    seq: int
    tokens: list[int]
    start: int = 0

    @property
    def context_len(self) -> int:
        return self.start + len(self.tokens)


def _allowed(query_pos: torch.Tensor, num_keys: int, window: int | None) -> torch.Tensor:
    """(Q, T) bool: causal, and within `window` positions when given (Mistral semantics)."""
    keys = torch.arange(num_keys)[None, :]
    allowed = keys <= query_pos[:, None]
    if window is not None:
        allowed &= keys > query_pos[:, None] - window
    return allowed


def prefill_batch(
    config: ModelConfig,
    chunks: list[Chunk],
    max_len: int = MAX_LEN,
    window: int | None = None,
    logits_index: list[int] | None = None,
    per_sequence: bool = True,
) -> tuple[torch.Tensor, ForwardBatch]:
    """(input_ids, batch) packing `chunks` into one forward; logits of every row by default.

    `per_sequence` fills seq_lengths as the runner does (attention sequence by sequence);
    without it attention runs over the padded (B, Q, T) batch. A model whose sliding layers
    sit among full ones (Gemma) also gets the window mask its sliding layers read.
    """
    layer_window = config.sliding_window if config.has_mixed_windows else None
    g = config.kv_group_size
    qlen = max(len(c.tokens) for c in chunks)
    tlen = max(c.context_len for c in chunks)
    positions, write_slots, query_index = [], [], []
    read_slots = torch.zeros(len(chunks), tlen, dtype=torch.int64)
    # Padded query rows (q >= this sequence's length) stay all False; their output is dropped.
    mask = torch.zeros(len(chunks), 1, qlen * g, tlen, dtype=torch.bool)
    window_mask = torch.zeros_like(mask)
    for b, chunk in enumerate(chunks):
        base = chunk.seq * max_len
        pos = torch.arange(chunk.start, chunk.context_len)
        positions.append(pos)
        write_slots.append(base + pos)
        query_index.append(b * qlen + torch.arange(len(chunk.tokens)))
        read_slots[b] = base  # padding points at a row of this sequence; masked anyway
        read_slots[b, : chunk.context_len] = base + torch.arange(chunk.context_len)
        allowed = _allowed(pos, tlen, window)
        mask[b, 0, : len(chunk.tokens) * g] = allowed.repeat_interleave(g, dim=0)
        windowed = _allowed(pos, tlen, layer_window)
        window_mask[b, 0, : len(chunk.tokens) * g] = windowed.repeat_interleave(g, dim=0)
    num_tokens = sum(len(c.tokens) for c in chunks)
    rows = range(num_tokens) if logits_index is None else logits_index
    batch = ForwardBatch(
        positions=torch.cat(positions),
        write_slots=torch.cat(write_slots),
        read_slots=read_slots,
        mask=mask,
        query_index=torch.cat(query_index),
        logits_index=torch.tensor(list(rows), dtype=torch.int64),
        max_query_len=qlen,
        seq_lengths=(
            tuple((len(c.tokens), c.context_len) for c in chunks) if per_sequence else None
        ),
        window_mask=window_mask if layer_window is not None else None,
    )
    input_ids = torch.tensor([t for c in chunks for t in c.tokens], dtype=torch.int64)
    return input_ids, batch


def decode_batch(
    chunks: list[Chunk],
    max_len: int = MAX_LEN,
    window: int | None = None,
    config: ModelConfig | None = None,
) -> tuple[torch.Tensor, ForwardBatch]:
    """One new token per sequence: query_index None and a (B, 1, 1, T) mask (and the window
    mask, for a `config` whose sliding layers sit among full ones)."""
    layer_window = None
    if config is not None and config.has_mixed_windows:
        layer_window = config.sliding_window
    if any(len(c.tokens) != 1 for c in chunks):
        raise ValueError("decode feeds exactly one token per sequence")
    tlen = max(c.context_len for c in chunks)
    read_slots = torch.zeros(len(chunks), tlen, dtype=torch.int64)
    mask = torch.zeros(len(chunks), 1, 1, tlen, dtype=torch.bool)
    window_mask = torch.zeros_like(mask)
    for b, chunk in enumerate(chunks):
        base = chunk.seq * max_len
        read_slots[b] = base
        read_slots[b, : chunk.context_len] = base + torch.arange(chunk.context_len)
        mask[b, 0] = _allowed(torch.tensor([chunk.start]), tlen, window)
        window_mask[b, 0] = _allowed(torch.tensor([chunk.start]), tlen, layer_window)
    positions = torch.tensor([c.start for c in chunks], dtype=torch.int64)
    batch = ForwardBatch(
        positions=positions,
        write_slots=torch.tensor([c.seq * max_len for c in chunks]) + positions,
        read_slots=read_slots,
        mask=mask,
        query_index=None,
        logits_index=torch.arange(len(chunks)),
        max_query_len=1,
        window_mask=window_mask if layer_window is not None else None,
    )
    input_ids = torch.tensor([c.tokens[0] for c in chunks], dtype=torch.int64)
    return input_ids, batch


def run(
    model: LlamaModel, cache: Cache, input_ids: torch.Tensor, batch: ForwardBatch
) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids, batch, cache.layers())


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


# --- GGUF -----------------------------------------------------------------------------------

# Hugging Face name (after `model.layers.{i}.`) → llama.cpp name (after `blk.{i}.`).
_GGUF_BLOCK = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
# Where an architecture's llama.cpp names differ (gguf's tensor_mapping for it).
_GGUF_GEMMA_BLOCK = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}
_GGUF_ARCH_BLOCK = {
    "gemma2": _GGUF_GEMMA_BLOCK,
    "gemma3": _GGUF_GEMMA_BLOCK,
    "phi3": {
        "self_attn.qkv_proj.weight": "attn_qkv.weight",
        "mlp.gate_up_proj.weight": "ffn_up.weight",
    },
}
_GGUF_TOP = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's q/k row interleaving (rotate-half → adjacent pairs)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _byte_tokens() -> list[str]:
    """GPT-2's byte → printable-unicode table: 256 tokens, one per byte, no merges needed."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _quantize(data: np.ndarray, kind: str) -> np.ndarray:
    """(rows, row bytes) codes: the gguf package's quantizer where it has one, else ggml's."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    qtype = GGMLQuantizationType[kind]
    try:
        return quantize(data, qtype)
    except NotImplementedError:
        return torch.ops.astrai_ggml.quantize(torch.from_numpy(data), int(qtype)).numpy()


def write_gguf(
    model: PreTrainedModel,
    path: Path,
    types: dict[str, str] | None = None,
    pooling_type: int | None = None,
) -> Path:
    """A GGUF of `model` laid out as llama.cpp writes one, with a byte-level tokenizer.

    `types` maps a GGUF tensor's name, or the part after `blk.N.` (`attn_q.weight`), to a
    ggml type name its 2-D weights are quantized to (F32 otherwise). `pooling_type`: ggml's
    enum (gguf.PoolingType), as a converter writes it for an embedding model.
    """
    from gguf import GGMLQuantizationType, GGUFWriter, PoolingType, RopeScalingType

    config = model.config
    arch = {"gemma3_text": "gemma3"}.get(config.model_type, config.model_type)
    gemma = arch in ("gemma2", "gemma3")
    rope = config.rope_parameters
    if gemma and "full_attention" in rope:
        rope = rope["full_attention"]
    writer = GGUFWriter(str(path), arch)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    rotary = int(config.head_dim * rope.get("partial_rotary_factor", 1.0))
    writer.add_rope_dimension_count(rotary)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_freq_base(rope["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    if rope.get("rope_type") == "linear":
        writer.add_rope_scaling_type(RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(rope["factor"])
    if rope.get("rope_type") == "longrope":  # as llama.cpp's Phi-3 converter writes it
        writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        original = rope["original_max_position_embeddings"]
        stretch = config.max_position_embeddings / original
        writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(stretch) / math.log(original)))
        for kind in ("long", "short"):
            factors = np.asarray(rope[f"{kind}_factor"], dtype=np.float32)
            writer.add_tensor(f"rope_factors_{kind}.weight", factors)
    if arch in ("mistral", "phi3") and config.sliding_window:
        writer.add_sliding_window(config.sliding_window)
    if gemma:  # as llama.cpp's converter writes them (its query scale is head_dim's)
        assert config.query_pre_attn_scalar == config.head_dim, "GGUF has no key for it"
        writer.add_sliding_window(config.sliding_window)
        writer.add_sliding_window_pattern(
            [kind == "sliding_attention" for kind in config.layer_types]
        )
        if getattr(config, "attn_logit_softcapping", None):
            writer.add_attn_logit_softcapping(config.attn_logit_softcapping)
        if getattr(config, "final_logit_softcapping", None):
            writer.add_final_logit_softcapping(config.final_logit_softcapping)
        if arch == "gemma3":
            writer.add_rope_freq_base_swa(config.rope_parameters["sliding_attention"]["rope_theta"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(_byte_tokens())
    writer.add_token_types([1] * 256)
    writer.add_token_scores([0.0] * 256)
    writer.add_token_merges([])
    writer.add_bos_token_id(config.bos_token_id)
    writer.add_eos_token_id(config.eos_token_id)
    if pooling_type is not None:
        writer.add_pooling_type(PoolingType(pooling_type))
    if gemma:  # transformers reads a Gemma file's vocabulary as SentencePiece's, with <unk>
        writer.add_unk_token_id(0)
    state = model.state_dict()
    if config.tie_word_embeddings:
        state.pop("lm_head.weight")
    for name, tensor in state.items():
        data = tensor.numpy()
        if arch == "llama" and ".q_proj." in name:
            data = llama_cpp_permute(data, config.num_attention_heads)
        elif arch == "llama" and ".k_proj." in name:
            data = llama_cpp_permute(data, config.num_key_value_heads)
        if gemma and name.endswith("norm.weight"):
            data = data + 1.0  # llama.cpp's converter: Gemma's RMSNorm scales by 1 + w
        if name in _GGUF_TOP:
            gguf_name = _GGUF_TOP[name]
        else:
            _, _, layer, rest = name.split(".", 3)
            names = {**_GGUF_BLOCK, **_GGUF_ARCH_BLOCK.get(arch, {})}
            gguf_name = f"blk.{layer}.{names[rest]}"
        data = np.ascontiguousarray(data, dtype=np.float32)
        kind = (types or {}).get(gguf_name) or (types or {}).get(gguf_name.split(".", 2)[-1])
        if kind is None or data.ndim != 2:
            writer.add_tensor(gguf_name, data)
            continue
        writer.add_tensor(gguf_name, _quantize(data, kind), raw_dtype=GGMLQuantizationType[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def copy_metadata(reader: Any, writer: Any) -> None:
    """Every metadata key of a GGUFReader's file into a GGUFWriter (its architecture aside,
    which the writer was made with)."""
    from gguf import GGUFValueType

    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        kind = field.types[0]
        sub = field.types[1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), kind, sub_type=sub)


def requantize_gguf(source: Path, target: Path, types: dict[str, str]) -> Path:
    """`source` with its 2-D tensors requantized as `types` says (keys as write_gguf's; others
    keep their codes), every metadata key copied: the same model, another mix of types."""
    from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
    from gguf.quants import dequantize

    reader = GGUFReader(str(source))
    writer = GGUFWriter(str(target), str(reader.fields["general.architecture"].contents()))
    copy_metadata(reader, writer)
    for tensor in reader.tensors:
        kind = types.get(tensor.name) or types.get(tensor.name.split(".", 2)[-1])
        if kind is None or len(tensor.shape) != 2:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
            continue
        values = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        qtype = GGMLQuantizationType[kind]
        writer.add_tensor(tensor.name, _quantize(values, kind), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target
