"""The native decode step computes what the reference forward computes, for every architecture."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.worker.model_factory import (
    LLAMA_LAYER_ARCHITECTURES,
    Chunk,
    decode_batch,
    hf_model,
    max_diff,
    new_cache,
    prefill_batch,
    random_tokens,
    run,
    save_hf,
    write_gguf,
)
from tests.worker.native import needs_ggml, needs_native_kernels
from worker.kernels.kquant_probe import tiles_available
from worker.kernels.plan import KernelPlan
from worker.model import native_decode
from worker.model.block_linear import BlockLinear
from worker.model.ggml_linear import GgmlLinear
from worker.model.llama import LlamaModel
from worker.model.loader import load_model
from worker.model.model_dir import resolve_model_dir

pytestmark = needs_native_kernels


# None: float layers, one native call per op; "q4_1": every layer in one astrai::decode_layers
# call; "q4_1 per layer": the same blocks, one call per op from Python.
@pytest.mark.slow  # 18 cases, ~11 s on 2 cores
@pytest.mark.parametrize("quantization", [None, "q4_1", "q4_1 per layer"])
@pytest.mark.parametrize("arch", LLAMA_LAYER_ARCHITECTURES)
def test_decode_steps_equal_the_reference_forward(arch: str, quantization: str | None, tmp_path):
    folder = save_hf(hf_model(arch), tmp_path)
    blocks = quantization is not None
    model = load_model(
        folder, torch.float32, torch.device("cpu"), quantization="q4_1" if blocks else None
    )
    assert model.native_decode
    assert isinstance(model.layers[0].mlp.down_proj, BlockLinear) == blocks
    # Qwen3's q/k norms are not in the one-call stack: its layers go one call per op.
    assert (model.stacked_layers is not None) == (blocks and not model.config.qk_norm)
    if quantization == "q4_1 per layer":
        model.stacked_layers = None
    stacked = model.stacked_layers is not None
    assert model.decode_path == (
        "every layer in one native call" if stacked else "native kernels, five calls per layer"
    )
    seqs = [random_tokens(n, seed=40 + n) for n in (5, 11, 2)]
    cache = new_cache(model.config, len(seqs))
    run(model, cache, *prefill_batch(model.config, [Chunk(s, t) for s, t in enumerate(seqs)]))
    reference_cache = copy.deepcopy(cache)
    window = model.config.sliding_window

    for step in range(3):
        chunks = [Chunk(s, [7 + step + s], start=len(t) + step) for s, t in enumerate(seqs)]
        input_ids, batch = decode_batch(chunks, window=window)
        assert native_decode.handles(model, batch, cache.layers())
        native = run(model, cache, input_ids, batch)
        model.native_decode = False
        reference = run(model, reference_cache, input_ids, batch)
        model.native_decode = True
        assert max_diff(native, reference) < 1e-4
        assert max_diff(cache.k, reference_cache.k) < 1e-5  # the same k/v were written


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
@pytest.mark.parametrize("quantization", [None, "q4_1"])
def test_gemma_layers_take_the_reference_forward(arch: str, quantization: str | None, tmp_path):
    folder = save_hf(hf_model(arch), tmp_path)
    model = load_model(folder, torch.float32, torch.device("cpu"), quantization=quantization)

    assert not model.native_decode
    assert not model.fused_blocks
    assert model.stacked_layers is None
    assert model.decode_path == "torch operators per layer"  # the startup line says so


def test_prefill_and_half_precision_caches_take_the_reference_path(tmp_path):
    folder = save_hf(hf_model("llama"), tmp_path)
    model = load_model(folder, torch.float32, torch.device("cpu"))
    cache = new_cache(model.config, 1)
    _, prefill = prefill_batch(model.config, [Chunk(0, [1, 2, 3])])
    _, decode = decode_batch([Chunk(0, [4], start=3)])
    assert not native_decode.handles(model, prefill, cache.layers())
    half = [(k.bfloat16(), v.bfloat16()) for k, v in cache.layers()]
    assert not native_decode.handles(model, decode, half)
    assert native_decode.handles(model, decode, cache.layers())


# Layer 0 as llama-quantize's mixes write it (Q4_K woven beside Q6_K; Q5_0 and Q5_1 in our
# records, exact: as Q8_0 and on ggml's vec_dot), layer 1 in our records too (Q4_1, and Q8_0
# for the down projection).
MIXED_TYPES = {
    "blk.0.attn_q.weight": "Q4_K",
    "blk.0.attn_k.weight": "Q4_K",
    "blk.0.attn_v.weight": "Q6_K",
    "blk.0.attn_output.weight": "Q5_1",
    "blk.0.ffn_gate.weight": "Q5_0",
    "blk.0.ffn_up.weight": "Q5_0",
    "blk.0.ffn_down.weight": "Q6_K",
    **{f"blk.1.{name}.weight": "Q4_1" for name in ("attn_q", "attn_k", "attn_v", "attn_output")},
    "blk.1.ffn_gate.weight": "Q4_1",
    "blk.1.ffn_up.weight": "Q4_1",
    "blk.1.ffn_down.weight": "Q8_0",
}


@needs_ggml
@pytest.mark.parametrize("int8", [False, True], ids=["exact", "file"])  # the block layers'
@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2: biases on q, k and v
@pytest.mark.usefixtures("shared_cache")
def test_a_gguf_of_mixed_types_decodes_every_layer_in_one_call(arch, int8, tmp_path):
    hf = hf_model(arch, hidden_size=256, intermediate_size=512, head_dim=64)
    folder = resolve_model_dir(write_gguf(hf, tmp_path / "mixed.gguf", MIXED_TYPES))
    cpu = torch.device("cpu")
    model = load_model(folder, torch.float32, cpu, quantization="gguf", int8_activations=int8)
    assert isinstance(model.layers[0].self_attn.qkv_proj, GgmlLinear)  # K-quants: ggml's
    gate_up = model.layers[0].mlp.gate_up_proj  # Q5_0: our records of its blocks (exact: as Q8_0)
    assert isinstance(gate_up, BlockLinear) and gate_up.int8 == int8
    o_proj = model.layers[0].self_attn.o_proj  # Q5_1: our records (exact: ggml's)
    assert isinstance(o_proj, BlockLinear if int8 else GgmlLinear)
    down = model.layers[1].mlp.down_proj
    assert isinstance(down, BlockLinear) and down.int8 == int8
    stack = model.stacked_layers
    assert stack is not None
    seqs = [random_tokens(n, seed=60 + n) for n in (9, 4)]
    cache = new_cache(model.config, len(seqs))
    run(model, cache, *prefill_batch(model.config, [Chunk(s, t) for s, t in enumerate(seqs)]))
    per_layer_cache = copy.deepcopy(cache)

    for step in range(3):
        chunks = [Chunk(s, [11 + step + s], start=len(t) + step) for s, t in enumerate(seqs)]
        input_ids, batch = decode_batch(chunks)
        one_call = run(model, cache, input_ids, batch)
        model.stacked_layers = None  # the same kernels, one call per op from Python
        per_layer = run(model, per_layer_cache, input_ids, batch)
        model.stacked_layers = stack
        # The same kernels on the same activations; only the norms' summation order differs.
        assert max_diff(one_call, per_layer) < 1e-3 * per_layer.abs().max().item()
        assert max_diff(cache.k, per_layer_cache.k) < 1e-3 * per_layer_cache.k.abs().max().item()


@needs_ggml
@pytest.mark.skipif(not tiles_available(), reason="the K-quant tile kernels need AMX-INT8")
@pytest.mark.usefixtures("shared_cache")
def test_a_decode_step_of_sixteen_rows_takes_the_tiles_in_the_one_call(tmp_path):
    hf = hf_model("llama", hidden_size=256, intermediate_size=512, head_dim=64)
    folder = resolve_model_dir(write_gguf(hf, tmp_path / "mixed.gguf", MIXED_TYPES))
    cpu = torch.device("cpu")
    models = {
        rows: load_model(
            folder,
            torch.float32,
            cpu,
            quantization="gguf",
            int8_activations=True,
            plan=KernelPlan(kquant_tiles_rows={"Q4_K": rows, "Q6_K": rows}),
        )
        for rows in (16, 0)  # the tiles from 16 rows; never
    }

    # The one call's K-quant gemv parts (q and k as one Q4_K weight; v and down Q6_K) carry
    # the rows from which they take the tiles.
    def tiles_from(model: LlamaModel) -> list[int]:  # per gemv part (kind 3)
        parts = model.stacked_layers.parts
        return [parts[i + 4] for i in range(0, len(parts), 5) if parts[i + 1] == 3]

    assert tiles_from(models[16]) == [16, 16, 16]
    assert tiles_from(models[0]) == [0, 0, 0]
    seqs = [random_tokens(3, seed=80 + n) for n in range(16)]
    outputs = []
    for model in models.values():
        cache = new_cache(model.config, len(seqs))
        run(model, cache, *prefill_batch(model.config, [Chunk(s, t) for s, t in enumerate(seqs)]))
        chunks = [Chunk(s, [11 + s], start=len(t)) for s, t in enumerate(seqs)]
        outputs.append(run(model, cache, *decode_batch(chunks)))
    tiles, gemv = outputs
    # The same integers on the tile unit and in the gemv; the float additions in another order.
    assert max_diff(tiles, gemv) < 1e-4 * gemv.abs().max().item()
