"""A prompt chunk through the fused block layers computes what the reference layers compute."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.worker.model_factory import (
    LLAMA_LAYER_ARCHITECTURES,
    Chunk,
    hf_model,
    max_diff,
    new_cache,
    prefill_batch,
    random_tokens,
    run,
    save_hf,
)
from tests.worker.native import needs_native_kernels
from worker.model import native_prefill
from worker.model.loader import load_model

pytestmark = needs_native_kernels


@pytest.mark.slow  # 6 architectures, a few seconds
@pytest.mark.parametrize("arch", LLAMA_LAYER_ARCHITECTURES)
def test_prefill_through_fused_blocks_equals_the_reference_layers(
    arch: str, tmp_path, monkeypatch: pytest.MonkeyPatch
):
    folder = save_hf(hf_model(arch), tmp_path)
    model = load_model(folder, torch.float32, torch.device("cpu"), quantization="q4_1")
    assert model.fused_blocks  # every layer Q4_1 blocks: the fused path
    calls: list[int] = []
    fused = native_prefill.prefill_block

    def counted(layer, x, *rest):
        calls.append(x.shape[0])
        return fused(layer, x, *rest)

    monkeypatch.setattr("worker.model.llama.prefill_block", counted)
    # Two sequences, one a second chunk after a cached start: every row attends to the cache.
    seqs = [random_tokens(n, seed=60 + n) for n in (9, 30)]
    cache = new_cache(model.config, len(seqs))
    run(model, cache, *prefill_batch(model.config, [Chunk(1, seqs[1][:16])]))
    reference_cache = copy.deepcopy(cache)
    chunks = [Chunk(0, seqs[0]), Chunk(1, seqs[1][16:], start=16)]
    fused_logits = run(model, cache, *prefill_batch(model.config, chunks))
    assert calls and all(rows == 9 + 14 for rows in calls[model.config.num_layers :])
    model.fused_blocks = False  # the reference layers
    reference_logits = run(model, reference_cache, *prefill_batch(model.config, chunks))
    model.fused_blocks = True
    assert len(calls) == 2 * model.config.num_layers  # the reference run made none
    # 23 rows take the panel kernel, which on AMX carries each activation in two bf16 parts
    # (16 significant bits): the fused and the reference norm round their outputs apart by
    # an ulp, which shows there as ~2^-17 of a value (1e-4 on these logits, 7e-5 on k).
    assert max_diff(fused_logits, reference_logits) < 5e-4
    assert max_diff(cache.k, reference_cache.k) < 3e-4
    assert max_diff(cache.v, reference_cache.v) < 3e-4
