"""GGUF → Hugging Face config and state: tiny llama.cpp-style files, and the real default model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGUFWriter

from tests.worker.gguf_oracle import transformers_from_gguf
from tests.worker.model_factory import hf_model, llama_cpp_permute, write_gguf
from worker.model.config import ModelConfig
from worker.model.default_model import default_model_path
from worker.model.gguf_reader import _unpermute_qk, hf_name, read_gguf


def test_unpermute_qk_restores_llama_cpp_permutation():
    q = np.arange(48 * 5, dtype=np.float32).reshape(48, 5)  # 3 heads of 16 rows
    k = np.arange(16 * 5, dtype=np.float32).reshape(16, 5) + 1000  # 1 kv head
    q_bias = np.arange(48, dtype=np.float32)
    state = {
        "model.layers.0.self_attn.q_proj.weight": torch.from_numpy(llama_cpp_permute(q, 3)),
        "model.layers.0.self_attn.k_proj.weight": torch.from_numpy(llama_cpp_permute(k, 1)),
        "model.layers.0.self_attn.q_proj.bias": torch.from_numpy(llama_cpp_permute(q_bias, 3)),
        "model.layers.0.self_attn.v_proj.weight": torch.from_numpy(k.copy()),
    }
    # The permutation really moves rows: head 0's row 1 is its second half's first row.
    assert torch.equal(state["model.layers.0.self_attn.q_proj.weight"][1], torch.from_numpy(q[8]))

    _unpermute_qk(state, {"num_attention_heads": 3, "num_key_value_heads": 1})

    assert torch.equal(state["model.layers.0.self_attn.q_proj.weight"], torch.from_numpy(q))
    assert torch.equal(state["model.layers.0.self_attn.k_proj.weight"], torch.from_numpy(k))
    assert torch.equal(state["model.layers.0.self_attn.q_proj.bias"], torch.from_numpy(q_bias))
    assert torch.equal(state["model.layers.0.self_attn.v_proj.weight"], torch.from_numpy(k))


@pytest.mark.parametrize(
    ("arch", "overrides"),
    [
        ("smollm", {}),
        ("qwen2", {}),
        ("mistral", {}),
        # GGUF has no tensor names for Llama's o_proj/MLP biases: this variant leaves them out.
        ("linear_rope", {"attention_bias": False, "mlp_bias": False}),
    ],
)
def test_read_gguf_round_trips_a_llama_cpp_style_file(arch, overrides, tmp_path):
    hf = hf_model(arch, **overrides)
    path = write_gguf(hf, tmp_path / "tiny.gguf")

    config, state = read_gguf(path)

    assert_state_read_back(state, hf, atol=0.0)
    hf_config = hf.config
    assert config["model_type"] == hf_config.model_type
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "vocab_size",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
    ):
        assert config[key] == getattr(hf_config, key), key
    assert config["rope_theta"] == hf_config.rope_parameters["rope_theta"]
    # GGUF stores eps as float32.
    assert config["rms_norm_eps"] == pytest.approx(hf_config.rms_norm_eps, rel=1e-6)
    if arch == "linear_rope":
        assert config["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
    else:
        assert "rope_scaling" not in config


def assert_state_read_back(state: dict[str, torch.Tensor], hf, atol: float) -> None:
    """The GGUF's tensors under Hugging Face names hold the model's float32 values."""
    expected = hf.state_dict()
    if hf.config.tie_word_embeddings:
        del expected["lm_head.weight"]
    assert sorted(state) == sorted(expected)
    for name, tensor in expected.items():
        assert state[name].dtype == torch.float32
        torch.testing.assert_close(state[name], tensor, rtol=0, atol=atol, msg=name)


def test_read_gguf_rejects_an_unsupported_architecture(tmp_path):
    path = tmp_path / "gpt2.gguf"
    writer = GGUFWriter(str(path), "gpt2")
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    with pytest.raises(ValueError, match="got 'gpt2'"):
        read_gguf(path)


# --- the real default model -----------------------------------------------------------------


@pytest.fixture(scope="module")
def default_gguf():
    """(our config, our state, transformers' model) for the shipped GGUF, loaded once."""
    path = default_model_path()
    config, state = read_gguf(path)
    return config, state, transformers_from_gguf(path)


@pytest.mark.slow
def test_default_model_state_equals_transformers_gguf_loading(default_gguf):
    _, state, hf = default_gguf
    theirs = hf.state_dict()

    # transformers materialises the tied head; the GGUF (and so our state) has none.
    assert theirs["lm_head.weight"].data_ptr() == theirs["model.embed_tokens.weight"].data_ptr()
    del theirs["lm_head.weight"]
    assert sorted(state) == sorted(theirs)
    assert len(state) == 272
    for name, tensor in theirs.items():
        assert state[name].shape == tensor.shape, name
        assert torch.equal(state[name], tensor), name


@pytest.mark.slow
def test_default_model_config_matches_transformers(default_gguf):
    config, _, hf = default_gguf

    expected = {
        "model_type": "llama",
        "num_hidden_layers": 30,
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    assert {key: config[key] for key in expected} == expected
    theirs = hf.config
    for key in expected:
        value = (
            theirs.rope_parameters["rope_theta"] if key == "rope_theta" else getattr(theirs, key)
        )
        assert config[key] == value, key
    assert config["rms_norm_eps"] == theirs.rms_norm_eps
    assert theirs.rope_parameters["rope_type"] == "default"


# GGUF architecture → the model_factory architecture whose tensors it names.
GGUF_ARCHITECTURES = {
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "phi3": "phi3",
}


@pytest.mark.parametrize("gguf_arch", list(GGUF_ARCHITECTURES))
def test_tensor_names_agree_with_the_gguf_packages_own_map(gguf_arch):
    """Our reading of GGUF names is the inverse of gguf's tensor_mapping (llama.cpp's)."""
    from gguf import MODEL_ARCH, get_tensor_name_map

    hf = hf_model(GGUF_ARCHITECTURES[gguf_arch])
    names = get_tensor_name_map(MODEL_ARCH[gguf_arch.upper()], hf.config.num_hidden_layers)
    for name in hf.state_dict():
        base, _, suffix = name.rpartition(".")
        gguf_name = names.get_name(base)
        if gguf_name is None:  # lm_head of a tied model: not written
            continue
        assert hf_name(f"{gguf_name}.{suffix}", gguf_arch) == name


@pytest.mark.parametrize("arch", ["gemma2", "gemma3", "phi3"])
def test_gemma_and_phi3_files_read_back_as_their_folders(arch, tmp_path):
    # GGUF keeps no query scale: llama.cpp's is head_dim's, as this model's.
    overrides = {"query_pre_attn_scalar": 16} if arch.startswith("gemma") else {}
    hf = hf_model(arch, **overrides)
    path = write_gguf(hf, tmp_path / f"{arch}.gguf")

    config, state = read_gguf(path)

    # Gemma's norms cross the file as 1 + w: float32 rounding of the round trip only.
    assert_state_read_back(state, hf, atol=2.5e-7)
    ours = ModelConfig.from_hf({**config, "rms_norm_eps": hf.config.rms_norm_eps})
    assert ours == ModelConfig.from_hf(hf.config.to_dict())
