"""Test helper: a tiny random-weight Qwen3 embedding model, saved as sentence-transformers
saves a decoder embedder such as Qwen3-Embedding (transformers' base model, the pooling
files), and transformers' own pooled embeddings of it, the reference ours are held to."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoModel, PreTrainedModel, Qwen3Config

from tests.e2e.harness import TOKENIZER_FILES

ST_MODES = {"last": "pooling_mode_lasttoken", "mean": "pooling_mode_mean_tokens"}
ST = "sentence_transformers.models."


def build_embedding_model(
    target: Path, tokenizer_dir: Path, pooling: str = "last", normalize: bool = True
) -> Path:
    """The folder: config and safetensors of a seeded float32 Qwen3 base model (hidden 64,
    2 layers, the default model's tokenizer), with modules.json naming Transformer, Pooling
    (`pooling`) and, with `normalize`, Normalize."""
    config = tiny_qwen3_config(tie_word_embeddings=True)  # as Qwen3-Embedding-0.6B
    model = randomized(AutoModel.from_config(config, dtype=torch.float32))
    save_with_tokenizer(model, target, tokenizer_dir)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": f"{ST}Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": f"{ST}Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": f"{ST}Normalize"})
        (target / "2_Normalize").mkdir()
    (target / "modules.json").write_text(json.dumps(modules))
    (target / "1_Pooling").mkdir()
    modes = {mode: False for mode in (*ST_MODES.values(), "pooling_mode_cls_token")}
    modes[ST_MODES[pooling]] = True
    pooling_config = {"word_embedding_dimension": 64, **modes, "include_prompt": True}
    (target / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config))
    return target


def tiny_qwen3_config(**fields: Any) -> Qwen3Config:
    """A seeded test model's size: hidden 64, 2 layers, the default model's vocabulary."""
    return Qwen3Config(
        **{
            "vocab_size": 49152,  # the default tokenizer's
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "max_position_embeddings": 256,
            "bos_token_id": 1,
            "eos_token_id": 2,
            **fields,
        }
    )


def randomized(model: PreTrainedModel, seed: int = 0) -> PreTrainedModel:
    """`model` with seeded weights larger than the default init (std 0.02), so attention is
    far from uniform and every position's state differs; norms near 1 keep activations near
    unit scale."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.125 * noise)
    return model


def save_with_tokenizer(model: PreTrainedModel, target: Path, tokenizer_dir: Path) -> None:
    """`model`'s config and safetensors in `target`, with the tokenizer of `tokenizer_dir`."""
    model.save_pretrained(str(target), safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, target / name)


def reference_model(folder: Path) -> PreTrainedModel:
    return AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()


def reference_embedding(
    model: PreTrainedModel, token_ids: list[int], pooling: str, dimensions: int | None = None
) -> torch.Tensor:
    """transformers' last hidden state (after the final norm), pooled, cut to `dimensions`
    and scaled to unit length, as sentence-transformers computes it."""
    with torch.inference_mode():
        states = model(torch.tensor([token_ids])).last_hidden_state[0].float()  # (T, hidden)
    pooled = {"last": states[-1], "mean": states.mean(0), "cls": states[0]}[pooling]
    return F.normalize(pooled[:dimensions], dim=0)
