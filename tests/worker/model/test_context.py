"""A context beyond the trained one: stretched RoPE when asked for, refused when not."""

from __future__ import annotations

import pytest

from tests.worker.model_factory import tiny_config
from worker.model.config import ModelConfig, with_context
from worker.model.rope_scaling import RopeScaling


def config(**overrides: object) -> ModelConfig:
    return tiny_config(max_position_embeddings=8192, **overrides)


@pytest.mark.parametrize("rope_type", ["linear", "yarn"])
def test_a_longer_context_stretches_rope_by_the_ratio(rope_type):
    stretched = with_context(config(), 32768, rope_type)

    assert stretched.max_position_embeddings == 32768
    assert stretched.rope_scaling == RopeScaling(
        rope_type=rope_type, factor=4.0, original_max_position_embeddings=8192
    )


@pytest.mark.parametrize("length", [None, 100, 8192])
def test_a_context_within_the_trained_one_keeps_the_config(length):
    original = config()

    assert with_context(original, length, None) is original
    if length is not None:
        assert with_context(original, length, "yarn") is original


def test_beyond_the_trained_context_without_scaling_is_refused_naming_both_lengths():
    with pytest.raises(
        ValueError,
        match=r"--max-model-len 32768 .* trained context of 8192 .*"
        r"--rope-scaling",
    ):
        with_context(config(), 32768, None)


def test_scaling_without_a_length_is_refused():
    with pytest.raises(ValueError, match="needs --max-model-len"):
        with_context(config(), None, "linear")


def test_a_model_that_already_scales_rope_is_not_stretched_again():
    llama3 = config(rope_scaling=RopeScaling(rope_type="llama3", factor=8.0))

    with pytest.raises(ValueError, match="already scales RoPE \\(llama3"):
        with_context(llama3, 200000, "linear")
