"""The prompt's own logprobs: every prompt token given the ones before it, as transformers
computes them, prefix-cached or not, whatever the chunking."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from common.sampling_params import SamplingParams
from worker.engine.inference_engine import InferenceEngine
from worker.engine.sequence import TokenEvent

pytestmark = pytest.mark.slow
TEXT = "The quick brown fox jumps over the lazy dog, and the dog sleeps on in the sun. " * 6


def first_events(
    engine: InferenceEngine, prompts: list[list[int]], params: SamplingParams
) -> list[TokenEvent]:
    done = threading.Semaphore(0)
    firsts: dict[int, TokenEvent] = {}

    def sink(event: TokenEvent) -> None:
        if event.token_ids and event.index not in firsts:
            firsts[event.index] = event
        if event.finish_reason is not None:
            done.release()

    engine.submit_prompts(list(prompts), params, sink, f"r{id(params)}")
    for _ in prompts:
        assert done.acquire(timeout=120)
    return [firsts[i] for i in range(len(prompts))]


def test_prompt_logprobs_equal_transformers_cached_or_not_in_small_chunks(tiny_model_dir: Path):
    hf = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    # A budget of 16 splits the prompt into many chunks, and the first request indexes the
    # prompt's pages for the second, which must compute them again for their logits.
    with InferenceEngine(
        tiny_model_dir,
        dtype="float32",
        kv_cache_mb=16,
        prefill_token_budget=16,
        idle_prefill_token_budget=16,
    ) as engine:
        ids = engine.requests.raw_prompt_ids([TEXT])[0]
        params = SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=3, logprobs=True)
        plain = first_events(engine, [ids], SamplingParams(temperature=0, max_tokens=2))[0]
        [event] = first_events(engine, [ids], params)
        assert plain.prompt_logprobs is None
        assert engine.get_stats()["kv_pages_in_use"] == 0
    with torch.inference_mode():
        expected = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)

    got = event.prompt_logprobs
    assert got is not None and len(got) == len(ids)
    assert (got[0].token_id, got[0].logprob, got[0].top) == (ids[0], None, ())
    for position in range(1, len(ids)):
        entry = got[position]
        row = expected[position - 1]
        assert entry.token_id == ids[position]
        assert entry.logprob == pytest.approx(float(row[ids[position]]), abs=1e-4)
        # Its rank among the vocabulary, up to the tokens within 1e-4 of it (summation order
        # may tie or untie a near-equal logit of a random model).
        x = row[ids[position]]
        assert int((row > x + 1e-4).sum()) < entry.rank <= int((row > x - 1e-4).sum()) + 1
        top = expected[position - 1].topk(3)
        assert [t.token_id for t in entry.top] == top.indices.tolist()
        assert [t.logprob for t in entry.top] == pytest.approx(top.values.tolist(), abs=1e-4)
    # The first generated token's own logprob is the last prompt row's, as always.
    assert event.logprobs[0].logprob == pytest.approx(float(expected[-1].max()), abs=1e-4)


def test_a_one_token_prompt_has_one_entry_without_a_logprob(tiny_model_dir: Path):
    with InferenceEngine(tiny_model_dir, dtype="float32", kv_cache_mb=16) as engine:
        params = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0)
        [event] = first_events(engine, [[5]], params)
    [entry] = event.prompt_logprobs or ()
    assert (entry.token_id, entry.logprob) == (5, None)
