"""A GGUF computed in its own codes: each tensor's type in its kernel, no float copy, bad files
named. The oracle is the same file dequantized to float32 (the gguf package's numpy code)."""

from __future__ import annotations

import re

import pytest
import torch

from bench.accuracy import sequence_logits
from tests.worker.model_factory import hf_model, random_tokens, write_gguf
from tests.worker.native import needs_ggml, needs_native_kernels
from worker.kernels.kquant_probe import gemv_available, gemv_isa
from worker.model.block_linear import BlockLinear
from worker.model.ggml_linear import GgmlEmbedding, GgmlLinear
from worker.model.gguf_tensors import GgufFileError
from worker.model.linear import PackedLinear
from worker.model.loader import load_model
from worker.model.model_dir import resolve_model_dir
from worker.model.precision import resolve_quantization
from worker.model.table_embedding import FloatEmbedding, RecordsEmbedding

pytestmark = pytest.mark.usefixtures("shared_cache")  # tokenizers converted once a session

CPU = torch.device("cpu")
# K-quants need rows of whole 256-value super-blocks.
K_SHAPES = {"hidden_size": 256, "intermediate_size": 512, "head_dim": 64}
# What llama-quantize's Q4_K_M writes: Q4_K mostly, Q6_K for v, down and the output layer.
Q4_K_M = {
    "token_embd.weight": "Q4_K",
    "output.weight": "Q6_K",
    "attn_q.weight": "Q4_K",
    "attn_k.weight": "Q4_K",
    "attn_v.weight": "Q6_K",
    "attn_output.weight": "Q4_K",
    "ffn_gate.weight": "Q4_K",
    "ffn_up.weight": "Q4_K",
    "ffn_down.weight": "Q6_K",
    "attn_qkv.weight": "Q4_K",  # Phi-3's fused q/k/v
}
LINEARS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def gguf_folder(tmp_path, monkeypatch, arch: str, types: dict[str, str] | None, **shape):
    hf = hf_model(arch, **shape)
    return resolve_model_dir(write_gguf(hf, tmp_path / f"{arch}.gguf", types))


def top1_agreement(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.argmax(-1) == b.argmax(-1)).float().mean().item()


# Llama in `make test-fast`; every other architecture in `make test` (each file costs ~3 s).
ARCHITECTURES = [
    "llama",
    *(pytest.param(a, marks=pytest.mark.slow) for a in ("mistral", "qwen2", "qwen3")),
    *(pytest.param(a, marks=pytest.mark.slow) for a in ("gemma2", "gemma3", "phi3")),
]


@needs_ggml
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_q4_k_m_file_runs_each_tensor_in_its_own_type(tmp_path, monkeypatch, arch):
    shape = {**K_SHAPES, "tie_word_embeddings": False}
    if arch.startswith("gemma"):  # llama.cpp's query scale: head_dim's
        shape["query_pre_attn_scalar"] = K_SHAPES["head_dim"]
    folder = gguf_folder(tmp_path, monkeypatch, arch, Q4_K_M, **shape)
    assert resolve_quantization("auto", folder, CPU) == ("gguf", False)

    model = load_model(folder, torch.float32, CPU, quantization="gguf")
    reference = load_model(folder, torch.float32, CPU)  # the file dequantized to float32

    qkv = model.layers[0].self_attn.qkv_proj
    # Phi-3's file holds q, k and v as one tensor, of one type.
    expected = ["Q4_K"] if arch == "phi3" else ["Q4_K", "Q4_K", "Q6_K"]
    assert isinstance(qkv, GgmlLinear) and qkv.type_names == expected
    assert isinstance(model.layers[1].mlp.down_proj, GgmlLinear)
    assert isinstance(model.embed_tokens, GgmlEmbedding)
    assert isinstance(model._head, GgmlLinear) and model._head.type_names == ["Q6_K"]
    q4_k = 6 if arch == "phi3" else 10  # two layers' Q4_K tensors: Phi-3 fuses three of five
    kernel = (
        rf"8-bit gemv \({gemv_isa()}\)" if gemv_available() else r"ggml (interleaved|vec_dot) \("
    )
    assert re.search(rf"Q4_K x{q4_k} → {kernel}", model.weight_paths)
    assert "Q6_K" in model.weight_paths
    ids = random_tokens(48, seed=3)
    ours, theirs = sequence_logits(model, ids), sequence_logits(reference, ids)
    # Only the activations' 8-bit blocks (llama.cpp's scheme) separate the two: ~5% of the
    # logits' norm through this random model (0.14% with F16 weights, whose activations are
    # fp16); a wrong row order or block would be ~100%.
    assert (ours - theirs).norm() <= 0.1 * theirs.norm()
    assert top1_agreement(ours, theirs) >= 0.85


@needs_ggml
def test_no_float_copy_of_a_quantized_weight_is_kept(tmp_path, monkeypatch):
    folder = gguf_folder(tmp_path, monkeypatch, "llama", Q4_K_M, **K_SHAPES)
    model = load_model(folder, torch.float32, CPU, quantization="gguf")

    def tensors(module: torch.nn.Module):
        for sub in module.modules():
            for value in vars(sub).values():
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, torch.Tensor):
                        yield item
            yield from sub.parameters(recurse=False)

    float_bytes = sum(t.nbytes for t in tensors(model) if t.is_floating_point())
    code_bytes = sum(t.nbytes for t in tensors(model) if t.dtype == torch.uint8)
    config = model.config
    weights = config.num_layers * (
        config.hidden_size * (config.num_heads + 2 * config.num_kv_heads) * config.head_dim
        + config.num_heads * config.head_dim * config.hidden_size
        + 3 * config.hidden_size * config.intermediate_size
    )
    # Codes take ~4.5-6.6 bits a weight; float32 is left only for norms and RoPE tables.
    assert code_bytes < weights
    rope = model.rope_cos.nbytes + model.rope_sin.nbytes
    assert float_bytes - rope < 0.01 * 4 * weights


@needs_native_kernels
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_q4_1_and_q8_0_files_take_the_native_kernels_on_their_own_codes(
    tmp_path, monkeypatch, kind
):
    types = {f"{name}.weight": kind for name in LINEARS}
    folder = gguf_folder(tmp_path, monkeypatch, "llama", types)

    model = load_model(folder, torch.float32, CPU, quantization="gguf")
    reference = load_model(folder, torch.float32, CPU)

    assert isinstance(model.layers[0].self_attn.qkv_proj, BlockLinear)
    assert model.stacked_layers is not None  # every layer in one native call
    assert isinstance(model._head, PackedLinear)  # this file's output layer is F32
    ids = random_tokens(32, seed=5)
    # Float32 activations against the very values the codes hold: summation order only.
    torch.testing.assert_close(
        sequence_logits(model, ids), sequence_logits(reference, ids), atol=2e-4, rtol=1e-4
    )


@needs_native_kernels
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_a_tied_table_is_held_once_in_the_output_layers_records(tmp_path, monkeypatch, kind):
    types = {f"{name}.weight": kind for name in (*LINEARS, "token_embd")}
    folder = gguf_folder(tmp_path, monkeypatch, "llama", types, tie_word_embeddings=True)

    model = load_model(folder, torch.float32, CPU, quantization="gguf")
    reference = load_model(folder, torch.float32, CPU)

    head, embedding = model._head, model.embed_tokens
    assert isinstance(head, BlockLinear) and isinstance(embedding, RecordsEmbedding)
    assert embedding.records is head.records
    assert f"{kind} x1 → rows read from the output layer's records" in model.weight_paths
    ids = torch.tensor(random_tokens(32, seed=9))
    torch.testing.assert_close(embedding(ids), reference.embed_tokens(ids), atol=0, rtol=0)
    torch.testing.assert_close(
        sequence_logits(model, ids.tolist()),
        sequence_logits(reference, ids.tolist()),
        atol=2e-4,
        rtol=1e-4,
    )


@needs_native_kernels
@needs_ggml
@pytest.mark.parametrize("kind", ["Q5_0", "Q5_1"])
def test_a_tied_5_bit_table_is_held_once_as_the_files_blocks(tmp_path, monkeypatch, kind):
    """Under 8-bit activations a Q5_0 or Q5_1 output layer keeps the file's blocks, and the
    embedding reads its rows back out of them."""
    types = {f"{name}.weight": kind for name in (*LINEARS, "token_embd")}
    folder = gguf_folder(tmp_path, monkeypatch, "llama", types, tie_word_embeddings=True)

    model = load_model(folder, torch.float32, CPU, quantization="gguf", int8_activations=True)
    reference = load_model(folder, torch.float32, CPU)

    head, embedding = model._head, model.embed_tokens
    assert isinstance(head, BlockLinear) and head.block_format == kind.lower()
    assert isinstance(embedding, RecordsEmbedding) and embedding.records is head.records
    assert f"{kind} x1 → rows read from the output layer's records" in model.weight_paths
    assert f"native {kind} kernel, 8-bit activations" in model.weight_paths
    ids = torch.tensor(random_tokens(32, seed=9))
    torch.testing.assert_close(embedding(ids), reference.embed_tokens(ids), atol=0, rtol=0)
    monkeypatch.setattr("worker.kernels.kernel_table.int8_block_kernels_available", lambda: False)
    theirs = load_model(folder, torch.float32, CPU, quantization="gguf", int8_activations=True)
    a, b = sequence_logits(model, ids.tolist()), sequence_logits(theirs, ids.tolist())
    assert (a - b).abs().max() <= 2e-3 * b.abs().max()  # ggml's arithmetic, summation order


def test_a_float32_file_under_gguf_is_float32_layers(tmp_path, monkeypatch):
    folder = gguf_folder(tmp_path, monkeypatch, "mistral", None)

    model = load_model(folder, torch.float32, CPU, quantization="gguf")
    reference = load_model(folder, torch.float32, CPU)

    assert isinstance(model.layers[0].mlp.gate_up_proj, PackedLinear)
    assert isinstance(model.embed_tokens, FloatEmbedding)  # the file's table, not a copy
    ids = random_tokens(24, seed=7)
    torch.testing.assert_close(
        sequence_logits(model, ids), sequence_logits(reference, ids), atol=1e-4, rtol=1e-4
    )


def test_a_truncated_file_is_named_with_the_cause(tmp_path, monkeypatch):
    folder_source = write_gguf(hf_model("llama"), tmp_path / "whole.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(folder_source.read_bytes()[: folder_source.stat().st_size // 2])

    with pytest.raises(GgufFileError, match=r"cut\.gguf.*truncated: tensor \S+ ends at byte"):
        load_model(resolve_model_dir(cut), torch.float32, CPU, quantization="gguf")


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        (b"", "the file is empty"),
        (b"PK\x03\x04 not a gguf at all", "no GGUF magic"),
        (b"GGUF\x07\x00\x00\x00", "GGUF version 7"),
        (b"GGUF\x03\x00\x00\x00\x01\x00", "truncated at byte"),
    ],
)
def test_a_file_that_is_not_gguf_is_named_with_the_cause(tmp_path, monkeypatch, content, cause):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)

    with pytest.raises(GgufFileError, match=rf"bad\.gguf: not a readable GGUF file: {cause}"):
        resolve_model_dir(bad)


def test_an_unknown_architecture_is_named(tmp_path, monkeypatch):
    from gguf import GGUFWriter

    path = tmp_path / "rwkv.gguf"
    writer = GGUFWriter(str(path), "rwkv7")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    with pytest.raises(GgufFileError, match=r"rwkv\.gguf: GGUF architecture must be one of"):
        resolve_model_dir(path)


def test_an_unknown_tensor_type_is_named_with_its_tensor(tmp_path, monkeypatch):
    path = write_gguf(hf_model("llama"), tmp_path / "odd.gguf")
    data = bytearray(path.read_bytes())
    # The type of the first tensor (token_embd.weight, F32 = 0) follows its name and dims.
    name = b"token_embd.weight"
    at = data.index(name) + len(name)
    at += 4 + 8 * int.from_bytes(data[at : at + 4], "little")
    data[at : at + 4] = (250).to_bytes(4, "little")
    path.write_bytes(bytes(data))

    with pytest.raises(GgufFileError, match=r"odd\.gguf: tensor token_embd\.weight: 250"):
        from worker.model.gguf_tensors import read_gguf_tensors

        read_gguf_tensors(path)


@needs_native_kernels
@needs_ggml
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0", "Q5_0"])
def test_precision_file_computes_our_records_as_ggml_computes_the_file(tmp_path, monkeypatch, kind):
    types = {f"{name}.weight": kind for name in LINEARS}
    folder = gguf_folder(tmp_path, monkeypatch, "llama", types)
    ours = load_model(folder, torch.float32, CPU, quantization="gguf", int8_activations=True)
    layer = ours.layers[0].self_attn.qkv_proj
    assert isinstance(layer, BlockLinear) and layer.int8
    # Where our block kernels lack 8-bit activations, ggml's kernels take those types.
    monkeypatch.setattr("worker.kernels.kernel_table.int8_block_kernels_available", lambda: False)
    theirs = load_model(folder, torch.float32, CPU, quantization="gguf", int8_activations=True)
    assert isinstance(theirs.layers[0].self_attn.qkv_proj, GgmlLinear)
    exact = load_model(folder, torch.float32, CPU, quantization="gguf")
    assert isinstance(exact.layers[0].self_attn.qkv_proj, BlockLinear)

    ids = random_tokens(32, seed=5)
    a, b = sequence_logits(ours, ids), sequence_logits(theirs, ids)
    # The same arithmetic: only the order of float additions parts them (a rare activation
    # may round to the other code through it).
    assert (a - b).abs().max() <= 2e-3 * b.abs().max()
    assert top1_agreement(a, b) == 1.0
    # Float32 activations are further off ggml's than our 8-bit ones.
    assert (sequence_logits(exact, ids) - b).abs().max() > 5 * (a - b).abs().max()
