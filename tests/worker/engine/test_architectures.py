"""Each architecture served end to end by the engine: greedy tokens equal to transformers'
`generate` on the same random-weight folder, and the same tokens from a GGUF of it."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from transformers import PreTrainedModel

from common.sampling_params import SamplingParams
from tests.worker.model_factory import (
    hf_model,
    random_tokens,
    save_hf,
    transformers_generate,
    write_gguf,
)
from worker.engine.inference_engine import InferenceEngine
from worker.engine.sequence import TokenEvent
from worker.model.model_dir import resolve_model_dir

pytestmark = pytest.mark.slow

# One of each family the README lists; past Gemma's window of 8 and Mistral's of 48 alike.
ARCHITECTURES = ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"]
PROMPTS = [random_tokens(12, seed=70), random_tokens(30, seed=71), random_tokens(5, seed=72)]
NEW_TOKENS = 40


def model(arch: str) -> PreTrainedModel:
    # A GGUF has no key for Gemma's query scale: llama.cpp takes head_dim's, as here.
    overrides = {"query_pre_attn_scalar": 16} if arch.startswith("gemma") else {}
    return hf_model(arch, seed=3, max_position_embeddings=256, **overrides)


def transformers_greedy(hf: PreTrainedModel, prompt: list[int]) -> list[int]:
    hf.generation_config.eos_token_id = None  # as ignore_eos: every run is NEW_TOKENS long
    return transformers_generate(hf, prompt, NEW_TOKENS)


def served_greedy(model_path: Path) -> list[list[int]]:
    """Every prompt at once (one continuous batch), greedy, through the engine."""
    with InferenceEngine(model_path, dtype="float32", kv_cache_mb=8) as engine:
        done = threading.Semaphore(0)
        tokens: dict[int, list[int]] = {}

        def sink(event: TokenEvent) -> None:
            tokens.setdefault(event.index, []).extend(event.token_ids)
            if event.finish_reason is not None:
                done.release()

        params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
        engine.submit_prompts(list(PROMPTS), params, sink, "greedy")
        for _ in PROMPTS:
            assert done.acquire(timeout=120)
        assert engine.get_stats()["kv_pages_in_use"] == 0
        return [tokens[i] for i in range(len(PROMPTS))]


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.usefixtures("shared_cache")  # where the GGUF's folder goes
def test_greedy_tokens_equal_transformers_generate_from_the_folder_and_its_gguf(
    arch: str, tmp_path: Path
):
    hf = model(arch)
    gguf = write_gguf(hf, tmp_path / f"{arch}.gguf")
    folder = save_hf(hf, tmp_path / arch)
    for name in ("tokenizer.json", "tokenizer_config.json"):  # the GGUF's byte tokenizer
        shutil.copy(resolve_model_dir(gguf) / name, folder / name)

    expected = [transformers_greedy(hf, prompt) for prompt in PROMPTS]

    assert served_greedy(folder) == expected
    assert served_greedy(gguf) == expected
