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
)
from tests.worker.native import needs_native_kernels
from worker.model import native_decode
from worker.model.block_linear import BlockLinear
from worker.model.loader import load_model

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
    assert (model.stacked_blocks is not None) == (blocks and not model.config.qk_norm)
    if quantization == "q4_1 per layer":
        model.stacked_blocks = None
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
    assert model.stacked_blocks is None


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
