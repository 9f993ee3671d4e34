"""The GGUF files the type benchmarks serve, made here and cached: no model is downloaded.

- the default model requantized by llama.cpp's `llama-quantize --allow-requantize` to each
  type a user brings (Q4_K_M, Q8_0, ...);
- a 1 B-class Llama (Llama-3.2-1B's shapes: hidden 2048, 16 layers, 32/8 heads, FFN 8192)
  with seeded random weights and the default model's tokenizer, written as F16 with the gguf
  package and quantized by llama-quantize.

Files live under `<cache>/bench-models/`; `llama-quantize` comes from
`bench/build_llama_server.sh`, beside `llama-server`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from worker.machine.paths import cache_root
from worker.model.gguf_header import read_header
from worker.model.model_dir import default_model_path

ONE_B_SHAPES = {
    "hidden": 2048,
    "layers": 16,
    "heads": 32,
    "kv_heads": 8,
    "ffn": 8192,
    "context": 8192,
}


def models_dir() -> Path:
    folder = cache_root() / "bench-models"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def requantized(llama_quantize: Path, source: Path, kind: str) -> Path:
    """`source` requantized to `kind` (a llama-quantize type name), made once."""
    target = models_dir() / f"{source.stem.split('.')[0]}.{kind}.gguf"
    if not target.is_file():
        partial = target.with_suffix(".partial")
        cmd = [str(llama_quantize), "--allow-requantize", str(source), str(partial), kind]
        subprocess.run(cmd, check=True, capture_output=True)
        partial.rename(target)
    return target


def default_requantized(llama_quantize: Path, kind: str) -> Path:
    return requantized(llama_quantize, default_model_path(), kind)


def one_b_f16(seed: int = 0) -> Path:
    """The 1 B-class Llama in F16 (~2 GB), with the default model's tokenizer and template."""
    target = models_dir() / "llama-1b-random.F16.gguf"
    if target.is_file():
        return target
    from gguf import GGUFWriter

    shapes = ONE_B_SHAPES
    head_dim = shapes["hidden"] // shapes["heads"]
    tokenizer = read_header(default_model_path()).metadata
    tokens, merges, types = _tokenizer_arrays(default_model_path())
    partial = target.with_suffix(".partial")
    writer = GGUFWriter(str(partial), "llama")
    writer.add_name("llama-1b-random")
    writer.add_block_count(shapes["layers"])
    writer.add_context_length(shapes["context"])
    writer.add_embedding_length(shapes["hidden"])
    writer.add_feed_forward_length(shapes["ffn"])
    writer.add_head_count(shapes["heads"])
    writer.add_head_count_kv(shapes["kv_heads"])
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(str(tokenizer.get("tokenizer.ggml.pre", "default")))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key in ("bos", "eos", "padding", "unknown"):
        value = tokenizer.get(f"tokenizer.ggml.{key}_token_id")
        if value is not None:
            writer.add_uint32(f"tokenizer.ggml.{key}_token_id", int(value))
    writer.add_chat_template(str(tokenizer["tokenizer.chat_template"]))
    rng = np.random.default_rng(seed)
    vocab, hidden, ffn = len(tokens), shapes["hidden"], shapes["ffn"]
    kv = shapes["kv_heads"] * head_dim

    def weight(rows: int, cols: int) -> np.ndarray:
        # std 1/sqrt(cols): activations keep their scale through the layers.
        return (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(
            np.float16
        )

    writer.add_tensor("token_embd.weight", weight(vocab, hidden))
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    for i in range(shapes["layers"]):
        block = f"blk.{i}."
        writer.add_tensor(block + "attn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(block + "ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(block + "attn_q.weight", weight(hidden, hidden))
        writer.add_tensor(block + "attn_k.weight", weight(kv, hidden))
        writer.add_tensor(block + "attn_v.weight", weight(kv, hidden))
        writer.add_tensor(block + "attn_output.weight", weight(hidden, hidden))
        writer.add_tensor(block + "ffn_gate.weight", weight(ffn, hidden))
        writer.add_tensor(block + "ffn_up.weight", weight(ffn, hidden))
        writer.add_tensor(block + "ffn_down.weight", weight(hidden, ffn))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(target)
    return target


def one_b(llama_quantize: Path, kind: str = "Q4_K_M") -> Path:
    return requantized(llama_quantize, one_b_f16(), kind)


def _tokenizer_arrays(path: Path) -> tuple[list[str], list[str], list[int]]:
    """The vocabulary, merges and token types, which the fast header reader skips."""
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields
    return (
        list(fields["tokenizer.ggml.tokens"].contents()),
        list(fields["tokenizer.ggml.merges"].contents()),
        [int(t) for t in fields["tokenizer.ggml.token_type"].contents()],
    )
