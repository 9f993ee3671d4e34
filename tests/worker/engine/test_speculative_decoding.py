"""Drafted tokens verified in the decode forward change how fast tokens come, never which."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.token_output import FinishReason, TokenLogprob
from tests.worker.stack_factory import Stack, tiny_stack
from worker.engine.drafting import joined
from worker.engine.sequence import TokenEvent
from worker.engine.speculation import DecodeCost, DraftState

# Every row free: every guess is fed. Every row as dear as a step: none is.
FREE_ROWS = DecodeCost((1, 2), (1.0, 1.0))
DEAR_ROWS = DecodeCost((1, 2), (1.0, 2.0))
STARTS = [[7, 8, 9, 10] * 3, list(range(300, 312)), list(range(600, 612))]


@pytest.fixture(scope="module")
def prompts(default_model_dir: Path) -> list[list[int]]:
    """Each start, what the tiny model says after it, and the start again: the model says
    much the same again, so the start's earlier occurrence makes good guesses. The last
    prompt is a plain start, whose output holds few repeats."""
    echoes = []
    for start in STARTS[:2]:
        said = run(default_model_dir, None, [start], max_tokens=24).collector.token_ids("r0")
        echoes.append(start + said + start)
    return [*echoes, STARTS[2]]


def run(
    model_dir: Path, cost: DecodeCost | None, prompts: list[list[int]], **sampling: object
) -> Stack:
    stack = tiny_stack(model_dir, **sampling.pop("stack", {}))  # type: ignore[arg-type]
    stack.scheduler.drafter.cost = cost
    for i, prompt in enumerate(prompts):
        stack.submit(prompt, f"r{i}", **sampling)
    stack.run()
    assert stack.cache.stats().pages_in_use == 0
    return stack


def outputs(stack: Stack, count: int) -> list[tuple[object, ...]]:
    """Per request: tokens, text, finish reason, usage, and the token ids of its logprobs."""
    result = []
    for i in range(count):
        events = stack.collector.events[f"r{i}"]
        logprob_ids = [
            (lp.token_id, [t.token_id for t in lp.top]) for e in events for lp in e.logprobs
        ]
        result.append(
            (
                stack.collector.token_ids(f"r{i}"),
                stack.collector.text(f"r{i}"),
                events[-1].finish_reason,
                events[-1].usage,
                logprob_ids,
            )
        )
    return result


def logprob_values(stack: Stack, count: int) -> list[float]:
    return [
        value
        for i in range(count)
        for e in stack.collector.events[f"r{i}"]
        for lp in e.logprobs
        for value in (lp.logprob, *(t.logprob for t in lp.top))
    ]


def assert_same_with_and_without_drafts(
    model_dir: Path, prompts: list[list[int]], **sampling: object
) -> Stack:
    plain = run(model_dir, None, prompts, **dict(sampling))
    drafted = run(model_dir, FREE_ROWS, prompts, **dict(sampling))
    assert outputs(drafted, len(prompts)) == outputs(plain, len(prompts))
    # A forward of more rows may round the last float bits differently, as batching does.
    values = logprob_values(plain, len(prompts))
    assert logprob_values(drafted, len(prompts)) == pytest.approx(values, rel=1e-4, abs=1e-5)
    assert plain.scheduler.counters.draft_tokens == 0
    assert drafted.scheduler.counters.accepted_draft_tokens > 0
    return drafted


@pytest.mark.slow  # seconds: two runs of the tiny model over many steps each
def test_greedy_tokens_are_the_same_with_drafts_some_kept_some_not(
    default_model_dir: Path, prompts: list[list[int]]
):
    drafted = assert_same_with_and_without_drafts(default_model_dir, prompts, max_tokens=40)
    counters = drafted.scheduler.counters
    assert 0 < counters.accepted_draft_tokens < counters.draft_tokens
    # A step's kept drafts reach the client in one event, fewer events than tokens.
    events = [e for i in range(len(prompts)) for e in drafted.collector.events[f"r{i}"]]
    assert len(events) < counters.total_tokens
    assert max(len(e.token_ids) for e in events) > 1


@pytest.mark.slow
def test_seeded_sampling_penalties_and_logprobs_are_the_same_with_drafts(
    default_model_dir: Path, prompts: list[list[int]]
):
    # One draw per emitted token in either case: the seeded stream is consumed alike.
    assert_same_with_and_without_drafts(
        default_model_dir,
        prompts,
        max_tokens=30,
        temperature=0.5,
        seed=11,
        repetition_penalty=1.01,
        frequency_penalty=0.02,
        logprobs=True,
        top_logprobs=3,
    )


@pytest.mark.slow
def test_a_stop_token_or_the_length_inside_a_draft_ends_it_there(
    default_model_dir: Path, prompts: list[list[int]]
):
    plain = run(default_model_dir, None, prompts[:1], max_tokens=40)
    tokens = plain.collector.token_ids("r0")
    stop = tokens[len(tokens) // 2]
    assert_same_with_and_without_drafts(
        default_model_dir, prompts, max_tokens=40, stop_token_ids=[stop]
    )
    assert_same_with_and_without_drafts(default_model_dir, prompts, max_tokens=13)


@pytest.mark.slow
def test_drafts_take_only_free_pages_and_never_preempt(
    default_model_dir: Path, prompts: list[list[int]]
):
    # 48 prompt tokens + 40 generated = 22 pages of 4: one page spare, for few drafts.
    tight = {"stack": {"num_pages": 23}, "max_tokens": 40}
    plain = run(default_model_dir, None, prompts[:1], **dict(tight))
    drafted = run(default_model_dir, FREE_ROWS, prompts[:1], **dict(tight))
    assert outputs(drafted, 1) == outputs(plain, 1)
    assert drafted.scheduler.counters.preemptions == plain.scheduler.counters.preemptions == 0
    assert drafted.scheduler.counters.accepted_draft_tokens > 0


def test_where_a_row_costs_a_step_nothing_is_drafted(
    default_model_dir: Path, prompts: list[list[int]]
):
    stack = tiny_stack(default_model_dir)
    stack.scheduler.drafter.cost = DEAR_ROWS
    stack.submit(prompts[0], "r0", max_tokens=12)
    for _ in range(6):
        stack.scheduler.step()
    [seq] = stack.scheduler.running
    assert seq.speculation is not None
    # Its guesses were checked against what it sampled, so its estimate rose above the prior.
    assert seq.speculation.acceptance > DraftState().acceptance
    stack.run()
    assert stack.scheduler.counters.draft_tokens == 0
    assert len(stack.collector.token_ids("r0")) == 12


def test_a_steps_events_of_one_choice_join_in_order_and_end_as_the_last():
    first = TokenEvent("r", 0, "a", (1,), (TokenLogprob(1, "a", -0.1),))
    last = TokenEvent(
        "r", 0, "b", (2,), (TokenLogprob(2, "b", -0.2),), finish_reason=FinishReason.STOP, stop=2
    )
    both = joined([first, last])
    assert (both.text, both.token_ids) == ("ab", (1, 2))
    assert [lp.token_id for lp in both.logprobs] == [1, 2]
    assert both.finish_reason == FinishReason.STOP and both.stop == 2
    assert joined([first]) is first


class RecordingCost:
    """FREE_ROWS, writing down the rows and seconds of every decode step it is told of."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, float]] = []

    def __call__(self, rows: int) -> float:
        return FREE_ROWS(rows)

    def observe(self, rows: int, seconds: float) -> None:
        self.steps.append((rows, seconds))


def test_every_decode_step_reports_its_rows_fed_and_its_time(
    default_model_dir: Path, prompts: list[list[int]]
):
    cost = RecordingCost()
    stack = run(default_model_dir, cost, prompts[:2], max_tokens=24)  # type: ignore[arg-type]
    counters = stack.scheduler.counters
    assert len(cost.steps) == counters.decode_steps
    assert all(seconds > 0 for _, seconds in cost.steps)
    # Each step feeds one row per decoding sequence (two at most) and its drafts.
    assert counters.draft_tokens > 0
    assert sum(rows for rows, _ in cost.steps) - counters.draft_tokens <= 2 * len(cost.steps)
    assert max(rows for rows, _ in cost.steps) > 2
