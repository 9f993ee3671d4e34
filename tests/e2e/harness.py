"""Test harness: a tiny random model folder; servers come from bench.server."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.server import REPO, TEST_DEVICE, Server, http_json, wait_until

__all__ = ["REPO", "Server", "build_tiny_model", "engine_device", "http_json", "wait_until"]


def engine_device() -> str:
    """Where an in-process engine that checks a served answer runs: the served workers'
    device (a GPU under bench/gpu_check.sh), so both compute alike."""
    return TEST_DEVICE or "cpu"


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def build_tiny_model(target: Path, tokenizer_dir: Path, max_positions: int = 1024) -> Path:
    """A 2-layer random-weight Llama with the default model's tokenizer, as an HF folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(target), safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, target / name)
    return target
