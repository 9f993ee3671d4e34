"""--max-model-len beyond the trained context: served with --rope-scaling, refused without."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.engine.inference_engine import InferenceEngine

pytestmark = pytest.mark.slow

# The tiny model's trained context is 1,024 tokens; this prompt is ~1,500.
LONG_PROMPT = "The quick brown fox jumps over the lazy dog. " * 150


@pytest.mark.parametrize("rope_scaling", ["linear", "yarn"])
def test_a_stretched_context_serves_a_prompt_longer_than_the_trained_one(
    tiny_model_dir: Path, rope_scaling: str
):
    with InferenceEngine(
        tiny_model_dir,
        dtype="float32",
        max_model_len=4096,
        rope_scaling=rope_scaling,
        kv_cache_mb=1,  # holds ~2,000 tokens: an explicit context grows it to one sequence
        speculative_tokens=0,
    ) as engine:
        assert engine.max_model_len == 4096
        assert engine.config.max_position_embeddings == 4096
        assert engine.config.rope_scaling.factor == 4.0
        prompt_ids = engine.requests.prompt_token_ids(LONG_PROMPT)
        assert 1024 < len(prompt_ids) < 4096
        text = engine.generate(LONG_PROMPT, temperature=0, max_tokens=8, ignore_eos=True)
        assert text
        assert engine.get_stats()["kv_pages_in_use"] == 0


def test_a_context_beyond_the_trained_one_without_scaling_is_refused(tiny_model_dir: Path):
    with pytest.raises(ValueError, match="beyond the model's trained context of 1024"):
        InferenceEngine(tiny_model_dir, max_model_len=4096, kv_cache_mb=16)
