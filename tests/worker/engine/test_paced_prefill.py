"""--prefill-step-ms on the default model: a prompt that arrives while a stream decodes is fed
in chunks sized by the measured step time."""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

from common.sampling_params import SamplingParams
from worker.engine.inference_engine import InferenceEngine
from worker.engine.prefill_pace import LEAST
from worker.engine.sequence import TokenEvent
from worker.engine.step_plan import Chunk

pytestmark = pytest.mark.slow


def wait_until(events: queue.Queue[TokenEvent], done: bool) -> None:
    """The next event that carries tokens (done=False) or ends its request (done=True)."""
    while True:
        event = events.get(timeout=120)
        if (event.finish_reason is not None) if done else bool(event.token_ids):
            return


def test_a_prompt_arriving_while_a_stream_decodes_is_fed_in_chunks_of_the_paced_size(
    default_model_dir: Path,
):
    with InferenceEngine(
        default_model_dir, prefill_step_ms=40, speculative_tokens=0, kv_disk_mb=0
    ) as engine:
        scheduler = engine.scheduler.scheduler
        pace = scheduler.pace
        assert pace is not None and pace.row_s is None
        budgets: list[tuple[int, int]] = []  # (decode rows, budget) of each plan
        prompt_budget = scheduler.prompt_budget

        def spy_budget(decode_rows: int) -> int:
            budget = prompt_budget(decode_rows)
            budgets.append((decode_rows, budget))
            return budget

        fed: list[tuple[int, int, list[Chunk]]] = []  # (decode rows, budget, prompt chunks)
        forward = engine.scheduler.runner.forward

        def spy_forward(chunks: list[Chunk]) -> object:
            fed.append((*budgets[-1], [c for c in chunks if c.prompt]))
            return forward(chunks)

        scheduler.prompt_budget = spy_budget  # type: ignore[method-assign]
        engine.scheduler.runner.forward = spy_forward  # type: ignore[method-assign]
        streamed: queue.Queue[TokenEvent] = queue.Queue()
        params = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
        # A raw prompt of a few tokens: its step is too small to be timed.
        engine.submit_prompts(["Once upon a time"], params, streamed.put, request_id="stream")
        wait_until(streamed, done=False)
        long_ids = engine.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 70)
        assert len(long_ids) > 600
        answered: queue.Queue[TokenEvent] = queue.Queue()
        short = SamplingParams(temperature=0, max_tokens=2)
        engine.submit_prompts([long_ids], short, answered.put, request_id="long")
        wait_until(answered, done=True)
        engine.abort("stream")
        wait_until(streamed, done=True)
    # Each step with the long prompt's tokens fed as many as the pace's budget of its plan
    # allowed (one decode row riding: "stream"), the last one what was left.
    paced = [(budget, chunks[0]) for rows, budget, chunks in fed if rows and chunks]
    assert len(paced) >= 3
    assert sum(len(c.token_ids) for _, c in paced) == len(long_ids)
    for budget, chunk in paced[:-1]:
        assert len(chunk.token_ids) == budget
    assert len(paced[-1][1].token_ids) <= paced[-1][0]
    # The first fed the starting budget (no step of 32 rows timed yet); the later ones the
    # time's, which 40 ms makes smaller on a CPU of this class (never below LEAST).
    assert paced[0][0] == 256
    assert all(LEAST <= budget < 256 for budget, _ in paced[1:])
    assert pace.row_s is not None
