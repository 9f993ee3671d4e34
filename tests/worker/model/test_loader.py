"""Loading Hugging Face folders and GGUF files into our fused-weight model; dtype choice."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel

from tests.worker.model_factory import ARCHITECTURES, hf_model, save_hf, write_gguf
from worker.model import model_dir, precision
from worker.model.config import ModelConfig
from worker.model.llama import LlamaModel
from worker.model.loader import load_model
from worker.model.model_dir import resolve_model_dir
from worker.model.precision import resolve_dtype
from worker.model.rope import qkv_row_order

CPU = torch.device("cpu")


def expected_state(hf: PreTrainedModel) -> dict[str, torch.Tensor]:
    """Our parameter names → the transformers tensors each must equal, q/k/v and gate/up fused."""
    theirs = hf.state_dict()

    def t(name: str) -> torch.Tensor:
        return theirs[f"model.{name}"]

    state = {
        "embed_tokens.weight": t("embed_tokens.weight"),
        "norm.weight": t("norm.weight"),
        "lm_head.weight": theirs["lm_head.weight"],
    }
    config = ModelConfig.from_hf(hf.config.to_dict())
    for i in range(hf.config.num_hidden_layers):
        p = f"layers.{i}."
        norms = ["input_layernorm", "post_attention_layernorm", "self_attn.q_norm"]
        # Qwen3's and Gemma 3's per-head norms; Gemma's norms around the MLP.
        norms += ["self_attn.k_norm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
        for norm in norms:
            if f"model.{p}{norm}.weight" in theirs:
                state[f"{p}{norm}.weight"] = t(f"{p}{norm}.weight")
        for kind in ("weight", "bias"):
            if f"model.{p}self_attn.q_proj.{kind}" in theirs:
                qkv = [t(f"{p}self_attn.{x}_proj.{kind}") for x in "qkv"]
                state[f"{p}self_attn.qkv_proj.{kind}"] = torch.cat(qkv)
            for fused in ("self_attn.qkv_proj", "mlp.gate_up_proj"):  # Phi-3's, as they are
                if f"model.{p}{fused}.{kind}" in theirs:
                    state[f"{p}{fused}.{kind}"] = t(f"{p}{fused}.{kind}")
            qkv_name = f"{p}self_attn.qkv_proj.{kind}"
            order = qkv_row_order(config)  # Phi-3's partial rotary: q/k dims reordered
            if order is not None and qkv_name in state:
                state[qkv_name] = state[qkv_name][order]
            if f"model.{p}self_attn.o_proj.{kind}" in theirs:
                state[f"{p}self_attn.o_proj.{kind}"] = t(f"{p}self_attn.o_proj.{kind}")
            if f"model.{p}mlp.gate_proj.{kind}" in theirs:
                gate_up = [t(f"{p}mlp.{x}_proj.{kind}") for x in ("gate", "up")]
                state[f"{p}mlp.gate_up_proj.{kind}"] = torch.cat(gate_up)
            if f"model.{p}mlp.down_proj.{kind}" in theirs:
                state[f"{p}mlp.down_proj.{kind}"] = t(f"{p}mlp.down_proj.{kind}")
    # Gemma's checkpoints hold RMSNorm weights as w; the model scales by 1 + w.
    for name in state:
        if name.endswith("norm.weight"):
            state[name] = state[name] + config.norm_offset
    return state


def assert_same_weights(ours: LlamaModel, hf: PreTrainedModel) -> None:
    expected = expected_state(hf)
    actual = ours.state_dict()
    assert sorted(actual) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(actual[name], tensor), name


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_single_file_folder_loads_the_transformers_weights(arch, tmp_path):
    hf = hf_model(arch)
    save_hf(hf, tmp_path)

    ours = load_model(tmp_path, torch.float32, CPU, pack=False)

    assert [p.name for p in tmp_path.glob("*.safetensors")] == ["model.safetensors"]
    assert_same_weights(ours, hf)
    assert not ours.training


@pytest.mark.parametrize("tied", [True, False])
def test_a_base_models_checkpoint_loads_as_its_causal_lms(tied, tmp_path):
    """transformers' AutoModel saves names without `model.` and no output layer (as
    sentence-transformers saves a decoder embedder): the same weights, and the embedding
    table as the output layer."""
    hf = hf_model("qwen3", tie_word_embeddings=tied)
    hf.model.save_pretrained(tmp_path, safe_serialization=True)
    assert "embed_tokens.weight" in load_file(tmp_path / "model.safetensors")

    ours = load_model(tmp_path, torch.float32, CPU, pack=False)

    expected = expected_state(hf)
    expected["lm_head.weight"] = hf.model.embed_tokens.weight
    actual = ours.state_dict()
    assert sorted(actual) == sorted(expected)
    assert all(torch.equal(actual[name], tensor) for name, tensor in expected.items())


def test_fused_qkv_is_q_then_k_then_v(tmp_path):
    hf = hf_model("qwen2")  # 4 heads, 2 kv heads, with q/k/v biases
    ours = load_model(save_hf(hf, tmp_path), torch.float32, CPU, pack=False)
    attn = hf.model.layers[1].self_attn

    qkv = ours.layers[1].self_attn.qkv_proj
    assert qkv.weight.shape == (64 + 32 + 32, 64)
    assert torch.equal(qkv.weight[:64], attn.q_proj.weight)
    assert torch.equal(qkv.weight[64:96], attn.k_proj.weight)
    assert torch.equal(qkv.weight[96:], attn.v_proj.weight)
    assert torch.equal(qkv.bias[64:96], attn.k_proj.bias)
    assert ours.layers[1].self_attn.o_proj.bias is None
    gate_up = ours.layers[1].mlp.gate_up_proj.weight
    assert torch.equal(gate_up[:128], hf.model.layers[1].mlp.gate_proj.weight)
    assert torch.equal(gate_up[128:], hf.model.layers[1].mlp.up_proj.weight)


def test_sharded_folder_loads_the_transformers_weights(tmp_path):
    hf = hf_model("linear_rope")  # every bias present, so every fused bias crosses shards
    save_hf(hf, tmp_path, max_shard_size="40KB")

    ours = load_model(tmp_path, torch.float32, CPU, pack=False)

    assert len(list(tmp_path.glob("*.safetensors"))) == 12
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert_same_weights(ours, hf)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tied_embeddings_share_storage(dtype, tmp_path):
    hf = hf_model("smollm")
    save_hf(hf, tmp_path)
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")

    ours = load_model(tmp_path, dtype, CPU, pack=False)

    assert ours.lm_head.weight is ours.embed_tokens.weight
    assert ours.embed_tokens.weight.dtype == dtype
    assert torch.equal(ours.embed_tokens.weight, hf.model.embed_tokens.weight.to(dtype))


def test_untied_head_has_its_own_storage(tmp_path):
    ours = load_model(save_hf(hf_model("llama"), tmp_path), torch.float32, CPU, pack=False)

    assert ours.lm_head.weight.data_ptr() != ours.embed_tokens.weight.data_ptr()


def test_rope_tables_stay_float32_in_a_bfloat16_model(tmp_path):
    ours = load_model(save_hf(hf_model("llama3_rope"), tmp_path), torch.bfloat16, CPU, pack=False)

    assert ours.dtype == torch.bfloat16
    assert ours.rope_cos.dtype == ours.rope_sin.dtype == torch.float32
    assert ours.rope_cos.shape == (128, 16)


@pytest.mark.parametrize(
    "missing",
    [
        "model.layers.1.self_attn.k_proj.weight",
        "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.self_attn.v_proj.bias",
        "model.layers.1.self_attn.o_proj.weight",
        "model.norm.weight",
        "lm_head.weight",
    ],
)
def test_missing_tensor_is_a_key_error_naming_it(missing, tmp_path):
    save_hf(hf_model("qwen2"), tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights[missing]
    save_file(weights, tmp_path / "model.safetensors")

    with pytest.raises(KeyError, match=re.escape(f"missing tensor '{missing}'")):
        load_model(tmp_path, torch.float32, CPU, pack=False)


def test_unexpected_tensor_is_an_error(tmp_path):
    save_hf(hf_model("llama"), tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["model.layers.0.extra.weight"] = torch.zeros(2)
    save_file(weights, tmp_path / "model.safetensors")

    with pytest.raises(RuntimeError, match=r"layers\.0\.extra\.weight"):
        load_model(tmp_path, torch.float32, CPU, pack=False)


def test_folder_without_config_json_is_file_not_found(tmp_path):
    save_hf(hf_model("llama"), tmp_path)
    (tmp_path / "config.json").unlink()

    with pytest.raises(FileNotFoundError, match=r"has no config\.json"):
        resolve_model_dir(tmp_path)


def test_path_that_is_neither_folder_nor_gguf_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(repr(str(tmp_path / "x.bin")))):
        resolve_model_dir(tmp_path / "x.bin")


def test_folder_is_returned_as_is(tmp_path):
    save_hf(hf_model("llama"), tmp_path)

    assert resolve_model_dir(tmp_path) == tmp_path


def cpuinfo_has_bf16() -> bool:
    flags = Path("/proc/cpuinfo").read_text()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def test_auto_dtype_on_cpu_follows_cpuinfo():
    expected = torch.bfloat16 if cpuinfo_has_bf16() else torch.float32

    assert resolve_dtype("auto", CPU) == expected


@pytest.mark.parametrize(("has_bf16", "expected"), [(True, torch.bfloat16), (False, torch.float32)])
def test_auto_dtype_on_cpu_is_bfloat16_only_with_native_support(has_bf16, expected, monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: has_bf16)

    assert resolve_dtype("auto", CPU) == expected


def test_auto_dtype_on_cuda_is_bfloat16(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)

    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16


@pytest.mark.parametrize(
    ("name", "expected"),
    [("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16)],
)
def test_named_dtype(name, expected):
    assert resolve_dtype(name, CPU) == expected


def test_unknown_dtype_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="got 'int3'"):
        resolve_dtype("int3", CPU)


def test_a_gguf_gets_a_cached_folder_of_config_and_tokenizer_and_no_weights(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ASTRAI_CACHE_DIR", str(cache))
    reads = []

    def counting_read(path):
        reads.append(path)
        return real_read(path)

    real_read = model_dir.read_gguf_config
    monkeypatch.setattr(model_dir, "read_gguf_config", counting_read)
    hf = hf_model("smollm")
    gguf = write_gguf(hf, tmp_path / "tiny.gguf")

    first = resolve_model_dir(gguf)
    second = resolve_model_dir(gguf)

    assert first == second
    assert reads == [gguf]
    assert first.parent == cache / "models"
    assert re.fullmatch(r"tiny-[0-9a-f]{16}-codes", first.name)
    assert list((cache / "models").iterdir()) == [first]  # no staging folder left behind
    names = {p.name for p in first.iterdir()}
    assert {"config.json", "gguf_source.json", "tokenizer.json"} <= names
    assert not [name for name in names if name.endswith(".safetensors")]
    assert model_dir.gguf_source(first) == gguf.resolve()
    # The float reference path dequantizes the file in memory.
    assert_same_weights(load_model(first, torch.float32, CPU, pack=False), hf)


@pytest.mark.usefixtures("shared_cache")
def test_a_gguf_folder_whose_file_is_gone_is_a_clear_error(tmp_path):
    gguf = write_gguf(hf_model("smollm"), tmp_path / "tiny.gguf")
    folder = resolve_model_dir(gguf)
    gguf.unlink()

    with pytest.raises(FileNotFoundError, match=r"tiny\.gguf, which is gone"):
        model_dir.gguf_source(folder)


@pytest.mark.usefixtures("shared_cache")
def test_gguf_tokenizer_is_saved_beside_the_weights(tmp_path):
    from transformers import AutoTokenizer

    folder = resolve_model_dir(write_gguf(hf_model("llama"), tmp_path / "tiny.gguf"))

    tokenizer = AutoTokenizer.from_pretrained(str(folder))

    assert tokenizer("hi")["input_ids"] == [ord("h"), ord("i")]


@pytest.mark.slow  # a GGUF written and refused by a child conversion, ~3 s: `make test` only
def test_gguf_without_a_tokenizer_is_refused_naming_the_file(tmp_path):
    """The conversion runs in a child process: its refusal reaches the worker as one
    GgufFileError naming the file and the cause, not as a child's traceback."""
    from gguf import GGUFWriter

    from worker.model.gguf_tensors import GgufFileError
    from worker.model.gguf_tokenizer import save_gguf_tokenizer

    path = tmp_path / "no-tokenizer.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    with pytest.raises(GgufFileError, match=r"no-tokenizer\.gguf: its tokenizer cannot be read"):
        save_gguf_tokenizer(path, tmp_path / "folder")
