"""RoPE frequencies against transformers' init functions, and rotation on known vectors."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from tests.worker.model_factory import tiny_config
from worker.model.config import ModelConfig, with_context
from worker.model.rope import apply_rope, attention_factor, inverse_frequencies, rope_tables
from worker.model.rope_scaling import RopeScaling

ROPE_PARAMETERS = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    # Llama 3.1's published values; with head_dim 128 all three bands (kept, divided, ramped)
    # are populated.
    "llama3": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}


def llama_config(rope_parameters: dict) -> LlamaConfig:
    return LlamaConfig(
        hidden_size=4096,
        num_attention_heads=32,
        head_dim=128,
        max_position_embeddings=131072,
        rope_parameters=rope_parameters,
    )


def transformers_frequencies(config: LlamaConfig) -> torch.Tensor:
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":  # v5 keeps the default outside ROPE_INIT_FUNCTIONS
        inv_freq, attention_factor = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config)
    # We never scale attention; a rope type that does is not one we may claim to support.
    assert attention_factor == 1.0
    return inv_freq


@pytest.mark.parametrize("rope_type", list(ROPE_PARAMETERS))
def test_inverse_frequencies_match_transformers(rope_type):
    hf = llama_config(ROPE_PARAMETERS[rope_type])
    ours = ModelConfig.from_hf(hf.to_dict())
    assert ours.rope_scaling.rope_type == rope_type

    inv_freq = inverse_frequencies(ours.head_dim, ours.rope_theta, ours.rope_scaling)

    assert inv_freq.shape == (64,)
    assert inv_freq.dtype == torch.float32
    torch.testing.assert_close(inv_freq, transformers_frequencies(hf), rtol=1e-6, atol=0)


def test_llama3_frequencies_keep_short_divide_long_and_ramp_between():
    scaling = RopeScaling(
        **{k: v for k, v in ROPE_PARAMETERS["llama3"].items() if k != "rope_theta"}
    )
    base = inverse_frequencies(128, 500000.0, RopeScaling())
    scaled = inverse_frequencies(128, 500000.0, scaling)
    wavelen = 2 * math.pi / base
    short = wavelen < 8192 / 4
    long = wavelen > 8192 / 1

    assert torch.equal(scaled[short], base[short])
    assert torch.equal(scaled[long], base[long] / 8.0)
    ramp = ~short & ~long
    assert (int(short.sum()), int(ramp.sum()), int(long.sum())) == (29, 6, 29)
    assert ((scaled[ramp] < base[ramp]) & (scaled[ramp] > base[ramp] / 8.0)).all()


def test_linear_frequencies_are_default_divided_by_factor():
    base = inverse_frequencies(16, 10000.0, RopeScaling())
    linear = inverse_frequencies(16, 10000.0, RopeScaling(rope_type="linear", factor=4.0))

    assert torch.equal(linear, base / 4.0)


def test_rope_tables_duplicate_halves_and_start_at_identity():
    cos, sin = rope_tables(tiny_config())

    assert cos.shape == sin.shape == (8, 4)
    assert torch.equal(cos[0], torch.ones(4))
    assert torch.equal(sin[0], torch.zeros(4))
    # head_dim 4, theta 10000: inverse frequencies 1 and 0.01, each used by both halves.
    expected = torch.tensor([3.0, 0.03, 3.0, 0.03])
    torch.testing.assert_close(cos[3], expected.cos(), rtol=0, atol=1e-6)
    torch.testing.assert_close(sin[3], expected.sin(), rtol=0, atol=1e-6)


def test_apply_rope_rotates_pairs_split_across_halves():
    cos, sin = rope_tables(tiny_config())
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])  # (N=1, heads=1, D=4)

    out = apply_rope(x, cos[3].view(1, 1, 4), sin[3].view(1, 1, 4))

    # Rotate-half pairs dimension i with i + D/2: (1, 3) by 3 rad and (2, 4) by 0.03 rad.
    a, b = 3.0, 0.03
    expected = torch.tensor(
        [
            1 * math.cos(a) - 3 * math.sin(a),
            2 * math.cos(b) - 4 * math.sin(b),
            3 * math.cos(a) + 1 * math.sin(a),
            4 * math.cos(b) + 2 * math.sin(b),
        ]
    )
    torch.testing.assert_close(out[0, 0], expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(out.norm(), x.norm(), rtol=1e-6, atol=0)


def test_apply_rope_at_position_zero_is_identity():
    cos, sin = rope_tables(tiny_config())
    x = torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(0))

    out = apply_rope(x, cos[0].expand(3, 1, 4), sin[0].expand(3, 1, 4))

    assert torch.equal(out, x)


def test_apply_rope_matches_transformers_on_packed_tokens():
    config = tiny_config(head_dim=16, max_position_embeddings=32)
    cos, sin = rope_tables(config)
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(5, 2, 16, generator=gen)  # (N, H, D)
    k = torch.randn(5, 1, 16, generator=gen)
    positions = torch.tensor([0, 7, 1, 30, 12])

    ours_q = apply_rope(q, cos[positions].unsqueeze(1), sin[positions].unsqueeze(1))
    ours_k = apply_rope(k, cos[positions].unsqueeze(1), sin[positions].unsqueeze(1))
    # transformers: (B=1, H, T, D) with (B, T, D) tables.
    ref_q, ref_k = apply_rotary_pos_emb(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos[positions][None], sin[positions][None]
    )

    torch.testing.assert_close(ours_q, ref_q[0].transpose(0, 1), rtol=0, atol=1e-6)
    torch.testing.assert_close(ours_k, ref_k[0].transpose(0, 1), rtol=0, atol=1e-6)


def test_yarn_frequencies_and_attention_factor_match_transformers():
    parameters = {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    hf = llama_config(parameters)
    ours = ModelConfig.from_hf(hf.to_dict())
    expected, factor = ROPE_INIT_FUNCTIONS["yarn"](hf)

    inv_freq = inverse_frequencies(ours.head_dim, ours.rope_theta, ours.rope_scaling)

    torch.testing.assert_close(inv_freq, expected, rtol=1e-6, atol=0)
    # Both ends of the ramp are populated: kept high frequencies and interpolated low ones.
    base = inverse_frequencies(128, 10000.0, RopeScaling())
    assert torch.equal(inv_freq[:8], base[:8])
    torch.testing.assert_close(inv_freq[-8:], base[-8:] / 4.0, rtol=1e-6, atol=0)
    assert attention_factor(ours.rope_scaling) == pytest.approx(factor)
    assert factor == pytest.approx(0.1 * math.log(4.0) + 1.0)


def test_yarn_tables_carry_the_attention_factor():
    scaling = RopeScaling(rope_type="yarn", factor=2.0, original_max_position_embeddings=8)
    cos, sin = rope_tables(tiny_config(rope_scaling=scaling, max_position_embeddings=16))

    scale = 0.1 * math.log(2.0) + 1.0
    torch.testing.assert_close(cos[0], torch.full((4,), scale), rtol=1e-6, atol=0)
    torch.testing.assert_close(cos.square() + sin.square(), torch.full((16, 4), scale**2))


LONGROPE = {
    "rope_type": "longrope",
    "rope_theta": 10000.0,
    "short_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0],
    "long_factor": [2.0, 3.0, 5.0, 7.0, 11.0, 13.0, 17.0, 19.0],
    "original_max_position_embeddings": 4096,
}


@pytest.mark.parametrize("served", [4096, 131072])
def test_longrope_factors_follow_the_served_context_as_llama_cpp(served):
    from transformers import Phi3Config

    hf = Phi3Config(
        hidden_size=64,
        num_attention_heads=4,
        max_position_embeddings=131072,
        rope_parameters=LONGROPE,
    )
    ours = with_context(ModelConfig.from_hf(hf.to_dict()), served, None)
    # transformers picks the long factors once a sequence passes the original context.
    long = served > 4096
    expected, factor = ROPE_INIT_FUNCTIONS["longrope"](hf, None, seq_len=served if long else None)

    inv_freq = inverse_frequencies(
        16, ours.rope_theta, ours.rope_scaling, ours.max_position_embeddings
    )

    torch.testing.assert_close(inv_freq, expected, rtol=1e-6, atol=0)
    # The softmax temperature fix is the trained context's, whatever context is served.
    assert attention_factor(ours.rope_scaling) == pytest.approx(factor)
    assert factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
