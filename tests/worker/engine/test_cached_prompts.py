"""A prompt answered from its cached pages answers as it did the first time, bit for bit."""

from __future__ import annotations

import queue
from pathlib import Path

from common.sampling_params import SamplingParams
from worker.engine.generation_api import until_finished
from worker.engine.inference_engine import InferenceEngine

# The small model copies this list; from its fifth token on the answer turns on a margin of
# 0.03 in log-probability, which a last prompt token computed by the decode step's arithmetic
# instead of the prefill's moved on AVX-512 CPUs.
COPY = [
    {
        "role": "user",
        "content": "Copy this list exactly: apples, pears, plums, apples, pears, plums, "
        "apples, pears.",
    }
]


def answer(engine: InferenceEngine) -> list[tuple[int, float]]:
    """The greedy tokens of COPY with their log-probabilities."""
    events: queue.Queue = queue.Queue()
    params = SamplingParams.from_kwargs(max_tokens=20, temperature=0, logprobs=True)
    engine.submit(COPY, params, events.put, chat=True)
    return [
        (lp.token_id, lp.logprob)
        for _, event in until_finished(events, 1)
        for lp in event.logprobs or []
    ]


def test_a_prompt_whose_pages_are_cached_gets_the_same_tokens_and_logprobs(
    default_model_dir: Path,
):
    with InferenceEngine(default_model_dir, speculative_tokens=0, kv_cache_mb=64) as engine:
        first = answer(engine)
        hits = engine.get_stats()["prefix_cache_hit_tokens"]
        second = answer(engine)
        # The second found the prompt's pages (all but its last token, fed alone).
        assert engine.get_stats()["prefix_cache_hit_tokens"] > hits
    assert len(first) == 20
    assert second == first
