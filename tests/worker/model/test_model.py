"""Our decoder against transformers, float32 logits within 1e-4, for every architecture.

Each test builds the ForwardBatch by hand the way the engine must (see model_factory), so a
failure here is either the model or the batch layout contract in worker/model/batch.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.worker.model_factory import (
    ARCHITECTURES,
    MAX_LEN,
    Chunk,
    decode_batch,
    hf_model,
    max_diff,
    model_pair,
    new_cache,
    prefill_batch,
    random_tokens,
    reference_logits,
    run,
    save_hf,
    write_gguf,
)
from worker.model.config import ModelConfig, with_context
from worker.model.loader import load_model
from worker.model.model_dir import resolve_model_dir
from worker.model.rope import partial_rotary_order

ARCHS = list(ARCHITECTURES)
TOL = 1e-4


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_one_sequence_matches_transformers(arch, tmp_path):
    hf, ours = model_pair(arch, tmp_path)
    tokens = random_tokens(13, seed=1)
    input_ids, batch = prefill_batch(ours.config, [Chunk(0, tokens)])

    logits = run(ours, new_cache(ours.config, 1), input_ids, batch)

    assert logits.dtype == torch.float32
    assert max_diff(logits, reference_logits(hf, tokens)) < TOL


def key_dims(config: ModelConfig) -> torch.Tensor:
    """Where each cached key dim of ours comes from in transformers' keys: the same order,
    except under a partial rotary dimension (Phi-3), whose q/k dims the loader reorders."""
    if config.rotary_dim is None:
        return torch.arange(config.head_dim)
    return partial_rotary_order(config.head_dim, config.rotary_dim)


@pytest.mark.slow  # seconds per architecture; one prefill per architecture stays fast
@pytest.mark.parametrize("per_sequence", [True, False], ids=["per-sequence", "padded"])
@pytest.mark.parametrize("arch", ARCHS)
def test_packed_prefill_of_three_sequences_matches_transformers(arch, per_sequence, tmp_path):
    hf, ours = model_pair(arch, tmp_path)
    seqs = [random_tokens(n, seed=10 + n) for n in (5, 12, 8)]
    chunks = [Chunk(s, t) for s, t in enumerate(seqs)]
    input_ids, batch = prefill_batch(ours.config, chunks, per_sequence=per_sequence)
    cache = new_cache(ours.config, 3)

    logits = run(ours, cache, input_ids, batch)

    assert logits.shape == (25, ours.config.vocab_size)
    rows = logits.split([5, 12, 8])
    for s, tokens in enumerate(seqs):
        assert max_diff(rows[s], reference_logits(hf, tokens)) < TOL
        # Each sequence's k/v landed in its own rows, equal to transformers' cache; the rest of
        # its rows are untouched.
        with torch.inference_mode():
            hf_cache = hf(torch.tensor([tokens]), use_cache=True).cache
        end = s * MAX_LEN + len(tokens)
        for layer in range(ours.config.num_layers):
            expected_k = hf_cache.layers[layer].keys[0].transpose(0, 1)  # (T, KVH, D)
            expected_v = hf_cache.layers[layer].values[0].transpose(0, 1)
            # transformers keeps a sliding layer's last rows only; we keep every row.
            own = slice(end - expected_k.shape[0], end)
            assert max_diff(cache.k[layer, own], expected_k[..., key_dims(ours.config)]) < TOL
            assert max_diff(cache.v[layer, own], expected_v) < TOL
        rest = slice(s * MAX_LEN + len(tokens), (s + 1) * MAX_LEN)
        assert not cache.k[:, rest].any()
        assert not cache.v[:, rest].any()


@pytest.mark.slow  # seconds per architecture; one prefill per architecture stays fast
@pytest.mark.parametrize("per_sequence", [True, False], ids=["per-sequence", "padded"])
@pytest.mark.parametrize("arch", ARCHS)
def test_chunked_prefill_attends_to_rows_of_the_first_chunk(arch, per_sequence, tmp_path):
    hf, ours = model_pair(arch, tmp_path)
    long_seq = random_tokens(13, seed=2)
    fresh = random_tokens(9, seed=3)
    cache = new_cache(ours.config, 2)

    first = run(ours, cache, *prefill_batch(ours.config, [Chunk(0, long_seq[:6])]))
    # The rest of sequence 0 rides in the same forward as a fresh prefill of sequence 1.
    chunks = [Chunk(0, long_seq[6:], start=6), Chunk(1, fresh)]
    second = run(ours, cache, *prefill_batch(ours.config, chunks, per_sequence=per_sequence))

    reference = reference_logits(hf, long_seq)
    assert max_diff(first, reference[:6]) < TOL
    assert max_diff(second[:7], reference[6:]) < TOL
    assert max_diff(second[7:], reference_logits(hf, fresh)) < TOL


@pytest.mark.slow  # seconds per architecture; one prefill per architecture stays fast
@pytest.mark.parametrize("arch", ARCHS)
def test_decoding_rows_riding_in_a_prefill_forward_match_transformers(arch, tmp_path):
    """One-token rows beside a prompt chunk (the scheduler's mixed step) attend together,
    padded to the longest context; each row's logits are its sequence's next token's."""
    hf, ours = model_pair(arch, tmp_path)
    seqs = [random_tokens(n, seed=40 + n) for n in (4, 11, 7)]
    cache = new_cache(ours.config, 4)
    run(ours, cache, *prefill_batch(ours.config, [Chunk(0, seqs[0]), Chunk(2, seqs[2])]))
    fresh = random_tokens(5, seed=50)
    nexts = [random_tokens(1, seed=60 + i)[0] for i in range(2)]
    chunks = [
        Chunk(0, [nexts[0]], start=len(seqs[0])),
        Chunk(3, fresh),
        Chunk(2, [nexts[1]], start=len(seqs[2])),
    ]
    logits = run(ours, cache, *prefill_batch(ours.config, chunks))
    assert max_diff(logits[0:1], reference_logits(hf, [*seqs[0], nexts[0]])[-1:]) < TOL
    assert max_diff(logits[1:6], reference_logits(hf, fresh)) < TOL
    assert max_diff(logits[6:7], reference_logits(hf, [*seqs[2], nexts[1]])[-1:]) < TOL


@pytest.mark.slow  # seconds per architecture; one prefill per architecture stays fast
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_decode_steps_match_transformers_on_the_sequence_so_far(arch, tmp_path):
    hf, ours = model_pair(arch, tmp_path)
    seqs = [random_tokens(n, seed=20 + n) for n in (3, 9, 6)]
    cache = new_cache(ours.config, 3)
    last_rows = [2, 11, 17]  # packed row of each prompt's last token
    chunks = [Chunk(s, t) for s, t in enumerate(seqs)]
    input_ids, batch = prefill_batch(ours.config, chunks, logits_index=last_rows)
    logits = run(ours, cache, input_ids, batch)
    assert logits.shape == (3, ours.config.vocab_size)

    for _ in range(4):
        for s, tokens in enumerate(seqs):
            assert max_diff(logits[s], reference_logits(hf, tokens)[-1]) < TOL
            tokens.append(int(logits[s].argmax()))
        steps = [Chunk(s, tokens[-1:], start=len(tokens) - 1) for s, tokens in enumerate(seqs)]
        input_ids, batch = decode_batch(steps, config=ours.config)
        assert batch.query_index is None
        assert batch.mask.shape == (3, 1, 1, max(len(t) for t in seqs))
        logits = run(ours, cache, input_ids, batch)

    for s, tokens in enumerate(seqs):
        assert max_diff(logits[s], reference_logits(hf, tokens)[-1]) < TOL


def test_mistral_sliding_window_holds_when_the_caller_masks_it(tmp_path):
    # Our model never reads config.sliding_window: the window lives in the caller's mask.
    hf = hf_model("mistral", sliding_window=5)
    ours = load_model(save_hf(hf, tmp_path), torch.float32, torch.device("cpu"))
    assert ours.config.sliding_window == 5
    tokens = random_tokens(14, seed=4)
    reference = reference_logits(hf, tokens)
    cache = new_cache(ours.config, 1)

    prefill = run(ours, cache, *prefill_batch(ours.config, [Chunk(0, tokens[:10])], window=5))
    decoded = [
        run(ours, cache, *decode_batch([Chunk(0, [tokens[p]], start=p)], window=5))[0]
        for p in range(10, 14)
    ]
    unwindowed = run(
        ours, new_cache(ours.config, 1), *prefill_batch(ours.config, [Chunk(0, tokens)])
    )

    assert max_diff(prefill, reference[:10]) < TOL
    assert max_diff(torch.stack(decoded), reference[10:]) < TOL
    # Positions past the window differ when the caller forgets it: the window matters here.
    assert max_diff(unwindowed[:5], reference[:5]) < TOL
    assert max_diff(unwindowed[5:], reference[5:]) > 0.1


def test_bfloat16_agrees_with_float32_on_top1(tmp_path):
    hf = hf_model("smollm")
    save_hf(hf, tmp_path)
    ours32 = load_model(tmp_path, torch.float32, torch.device("cpu"))
    ours16 = load_model(tmp_path, torch.bfloat16, torch.device("cpu"))
    tokens = random_tokens(40, seed=5)
    input_ids, batch = prefill_batch(ours32.config, [Chunk(0, tokens)])

    logits32 = run(ours32, new_cache(ours32.config, 1), input_ids, batch)
    logits16 = run(ours16, new_cache(ours16.config, 1), input_ids, batch)

    assert ours16.dtype == torch.bfloat16
    assert logits16.dtype == torch.float32
    assert torch.isfinite(logits16).all()
    agreement = (logits16.argmax(-1) == logits32.argmax(-1)).float().mean().item()
    assert agreement >= 0.9


PHI3_LONGROPE = {
    "rope_type": "longrope",
    "rope_theta": 1e4,
    "partial_rotary_factor": 0.5,
    "short_factor": [1.0, 1.5, 2.5, 4.0],
    "long_factor": [3.0, 5.0, 9.0, 17.0],
    "original_max_position_embeddings": 16,
}


@pytest.mark.usefixtures("shared_cache")
def test_phi3_longrope_takes_its_long_factors_past_the_original_context_and_from_gguf(tmp_path):
    hf = hf_model(
        "phi3",
        rope_parameters=PHI3_LONGROPE,
        max_position_embeddings=128,
        original_max_position_embeddings=16,  # Phi3Config's own key wins over rope_parameters'
    )
    folder = save_hf(hf, tmp_path / "folder")
    long_tokens, short_tokens = random_tokens(24, seed=8), random_tokens(12, seed=9)
    # Served at the trained 128: the long factors (transformers: a sequence past 16).
    ours = load_model(folder, torch.float32, torch.device("cpu"))
    logits = run(
        ours, new_cache(ours.config, 1), *prefill_batch(ours.config, [Chunk(0, long_tokens)])
    )
    assert max_diff(logits, reference_logits(hf, long_tokens)) < TOL
    # Served at the original 16: the short ones.
    short = with_context(ours.config, 16, None)
    ours_short = load_model(folder, torch.float32, torch.device("cpu"), config=short)
    batch = prefill_batch(short, [Chunk(0, short_tokens)])
    logits = run(ours_short, new_cache(short, 1), *batch)
    assert max_diff(logits, reference_logits(hf, short_tokens)) < TOL
    # A GGUF carries the factors as tensors and the rest as keys, as llama.cpp's converter.
    gguf_dir = resolve_model_dir(write_gguf(hf, tmp_path / "phi3.gguf"))
    from_gguf = load_model(gguf_dir, torch.float32, torch.device("cpu"), quantization="gguf")
    theirs, mine = from_gguf.config.rope_scaling, ours.config.rope_scaling
    assert replace(theirs, attention_factor=None) == replace(mine, attention_factor=None)
    assert theirs.attention_factor == pytest.approx(mine.attention_factor)  # a float32 key
    logits = run(
        from_gguf, new_cache(ours.config, 1), *prefill_batch(ours.config, [Chunk(0, long_tokens)])
    )
    assert max_diff(logits, reference_logits(hf, long_tokens)) < TOL
