"""EngineCore on a tiny random model: batching, chunking, sharing, preemption, aborts."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from common.sampling_params import SamplingParams
from common.token_output import FinishReason
from tests.worker.stack_factory import Stack, tiny_stack
from worker.engine.step_plan import Chunk
from worker.model.shared_prefix import MIN_SHARED_ROWS

PROMPT_33 = list(range(1000, 1033))  # 8 full pages of 4 and one token over


def record_forwards(stack: Stack) -> list[list[Chunk]]:
    calls: list[list[Chunk]] = []
    forward = stack.scheduler.runner.forward

    def spy(chunks):
        calls.append(list(chunks))
        return forward(chunks)

    stack.scheduler.runner.forward = spy  # type: ignore[method-assign]
    return calls


def solo_tokens(model_dir: Path, prompt: list[int], **sampling: object) -> list[int]:
    stack = tiny_stack(model_dir)
    stack.submit(prompt, "solo", **sampling)
    stack.run()
    return stack.collector.token_ids("solo")


def test_prompts_of_different_lengths_prefill_in_one_forward_then_decode_together(
    default_model_dir: Path,
):
    stack = tiny_stack(default_model_dir)
    calls = record_forwards(stack)
    for i, length in enumerate((5, 9, 14)):
        stack.submit(list(range(500 * (i + 1), 500 * (i + 1) + length)), f"r{i}", max_tokens=3)
    stack.scheduler.step()
    stack.scheduler.step()
    assert [[len(c.token_ids) for c in call] for call in calls] == [[5, 9, 14], [1, 1, 1]]
    stack.run()
    assert [len(call) for call in calls] == [3, 3, 3]  # prefill, then two batched decodes
    assert all(len(stack.collector.token_ids(f"r{i}")) == 3 for i in range(3))
    assert stack.cache.stats().pages_in_use == 0


def test_the_steps_that_feed_prompt_tokens_are_timed_for_the_pace(default_model_dir: Path):
    stack = tiny_stack(default_model_dir, prefill_step_s=0.5)
    pace = stack.scheduler.scheduler.pace
    assert pace is not None
    observed: list[tuple[int, float]] = []
    observe = pace.observe

    def spy(rows: int, seconds: float) -> None:
        observed.append((rows, seconds))
        observe(rows, seconds)

    pace.observe = spy  # type: ignore[method-assign]
    stack.submit(list(range(2000, 2040)), "long", max_tokens=3)
    stack.run()  # a prompt step, then two decode steps, which the pace does not read
    [(rows, seconds)] = observed
    assert rows == 40 and 0 < seconds < 60
    assert pace.row_s == pytest.approx(seconds / 40)


@pytest.mark.slow  # seconds: the tiny model over the default tokenizer, many steps
def test_batched_output_equals_each_prompt_alone(default_model_dir: Path):
    prompts = [list(range(700, 700 + n)) for n in (3, 8, 17, 30)]
    stack = tiny_stack(default_model_dir)
    for i, prompt in enumerate(prompts):
        stack.submit(prompt, f"r{i}", max_tokens=12)
    stack.run()
    for i, prompt in enumerate(prompts):
        assert stack.collector.token_ids(f"r{i}") == solo_tokens(
            default_model_dir, prompt, max_tokens=12
        )


@pytest.mark.slow  # seconds: the tiny model over the default tokenizer, many steps
@pytest.mark.parametrize("mixed", [True, False], ids=["riding", "own-forward"])
def test_chunked_prefill_keeps_running_streams_decoding(default_model_dir: Path, mixed: bool):
    stack = tiny_stack(default_model_dir, budget=8, mixed_steps=mixed)
    calls = record_forwards(stack)
    stack.submit([7, 8, 9], "short", max_tokens=20)
    stack.scheduler.step()
    stack.submit(list(range(2000, 2040)), "long", max_tokens=4)
    calls.clear()
    for _ in range(5 if mixed else 10):  # one forward a step
        stack.scheduler.step()
    if mixed:  # a prompt chunk, then the running stream's token
        assert [[len(c.token_ids) for c in call] for call in calls] == [[8, 1]] * 5
        assert all(call[1].seq_id == 0 for call in calls)
    else:  # decode and prompt forwards in turn; short's prompt's came last, so a decode first
        assert [[len(c.token_ids) for c in call] for call in calls] == [[1], [8]] * 5
        assert all(call[0].seq_id == 0 for call in calls[0::2])
    stack.run()
    assert stack.collector.token_ids("long") == solo_tokens(
        default_model_dir, list(range(2000, 2040)), max_tokens=4
    )
    assert stack.collector.token_ids("short") == solo_tokens(
        default_model_dir, [7, 8, 9], max_tokens=20
    )


@pytest.mark.parametrize("mixed", [True, False], ids=["riding", "own-forward"])
def test_first_tokens_leave_at_their_steps_end_before_any_decode_forward(
    default_model_dir: Path, mixed: bool
):
    stack = tiny_stack(default_model_dir, mixed_steps=mixed)
    happened: list[str] = []
    forward = stack.scheduler.runner.forward

    def spy(chunks):
        happened.append("decode" if all(len(c.token_ids) == 1 for c in chunks) else "prefill")
        return forward(chunks)

    def loop_steps(count: int) -> None:  # as EngineCore.run: flush after every step
        for _ in range(count):
            stack.scheduler.step()
            stack.scheduler.flush()

    stack.scheduler.runner.forward = spy  # type: ignore[method-assign]
    stack.scheduler.flush_listeners.append(
        lambda: happened.append(f"flush {len(stack.collector.token_ids('new'))}")
    )
    stack.submit(list(range(2000, 2010)), "new", max_tokens=4)
    loop_steps(2)
    assert happened == ["prefill", "flush 1", "decode", "flush 2"]
    stack.submit([7, 8, 9], "other", max_tokens=4)
    happened.clear()
    loop_steps(2)
    # A running stream: its token rides in the prompt's forward, or waits for its own.
    expected = ["prefill", "flush 3", "decode", "flush 4"]
    assert happened == (expected if mixed else ["prefill", "flush 2", "decode", "flush 3"])


@pytest.mark.parametrize("mixed", [True, False], ids=["riding", "own-forward"])
def test_a_new_stream_rides_in_the_next_prompt_chunk_rather_than_delay_it(
    default_model_dir: Path, mixed: bool
):
    stack = tiny_stack(default_model_dir, budget=8, mixed_steps=mixed)
    calls = record_forwards(stack)
    stack.submit([7, 8, 9], "short", max_tokens=3)
    stack.submit(list(range(2000, 2012)), "long", max_tokens=3)
    for _ in range(2 if mixed else 4):  # short's prompt and long's first 5 tokens first
        stack.scheduler.step()
    shapes = [[len(c.token_ids) for c in call] for call in calls]
    # Riding: long's next chunk comes at once, short's second token in its forward; else
    # prompt forwards and decode forwards take turns.
    assert shapes == ([[3, 5], [7, 1]] if mixed else [[3, 5], [1], [7], [1, 1]])
    stack.run()
    assert stack.collector.token_ids("short") == solo_tokens(
        default_model_dir, [7, 8, 9], max_tokens=3
    )
    assert stack.collector.token_ids("long") == solo_tokens(
        default_model_dir, list(range(2000, 2012)), max_tokens=3
    )


@pytest.mark.slow  # seconds: the tiny model over the default tokenizer, many steps
@pytest.mark.parametrize("budget", [512, 8])
def test_requests_arriving_together_compute_a_shared_prefix_once(
    default_model_dir: Path, budget: int
):
    stack = tiny_stack(default_model_dir, budget=budget)
    for i in range(4):
        stack.submit(PROMPT_33, f"r{i}", max_tokens=5)
    stack.run()
    counters = stack.scheduler.counters
    assert counters.prefill_tokens == 33 + 3 * 1  # the other three only compute their tail
    assert stack.cache.stats().hit_tokens == 3 * 32
    expected = solo_tokens(default_model_dir, PROMPT_33, max_tokens=5)
    assert all(stack.collector.token_ids(f"r{i}") == expected for i in range(4))


@pytest.mark.slow  # seconds: the tiny model over the default tokenizer, many steps
@pytest.mark.parametrize("budget", [512, 8])
def test_requests_arriving_together_share_a_prefix_ending_mid_page(
    default_model_dir: Path, budget: int
):
    """The rows past the last shared full page are read where the first prompt computes
    them (budget 512: all in one forward) or copied once it has (budget 8), never computed
    again."""
    stack = tiny_stack(default_model_dir, budget=budget)
    shared = list(range(1000, 1030))  # 7 full pages of 4 and two tokens over
    prompts = [[*shared, *range(3000 + 10 * i, 3003 + 10 * i)] for i in range(4)]
    for i, prompt in enumerate(prompts):
        stack.submit(prompt, f"r{i}", max_tokens=5)
    stack.run()
    assert stack.scheduler.counters.prefill_tokens == 33 + 3 * 3  # the others: their own 3
    assert stack.cache.stats().hit_tokens == 3 * 30
    for i, prompt in enumerate(prompts):
        assert stack.collector.token_ids(f"r{i}") == solo_tokens(
            default_model_dir, prompt, max_tokens=5
        )


@pytest.mark.slow  # seconds: the tiny model over the default tokenizer, many steps
def test_tails_behind_a_shared_prompt_attend_over_it_together_as_each_alone(
    default_model_dir: Path,
):
    stack = tiny_stack(default_model_dir, num_pages=128)
    shared = list(range(1000, 1000 + MIN_SHARED_ROWS + 8))
    prompts = [[*shared, *range(3000 + 10 * i, 3000 + 10 * i + 3 + i)] for i in range(4)]
    groups = []
    build = stack.scheduler.runner.build_batch

    def spy(chunks):
        input_ids, batch = build(chunks)
        groups.extend((p.seqs, p.length) for p in batch.shared_prefixes)
        return input_ids, batch

    stack.scheduler.runner.build_batch = spy  # type: ignore[method-assign]
    for i, prompt in enumerate(prompts):
        stack.submit(prompt, f"r{i}", max_tokens=5)
    stack.run()
    # One forward: the first computes the shared pages (written before any query reads
    # them), the other three their tails, over the shared rows together.
    assert groups == [((1, 2, 3), len(shared))]
    for i, prompt in enumerate(prompts):
        assert stack.collector.token_ids(f"r{i}") == solo_tokens(
            default_model_dir, prompt, max_tokens=5
        )


def test_a_finished_prompt_is_served_from_the_cache(default_model_dir: Path):
    stack = tiny_stack(default_model_dir)
    stack.submit(PROMPT_33, "first", max_tokens=3)
    stack.run()
    before = stack.scheduler.counters.prefill_tokens
    stack.submit([*PROMPT_33[:32], 4242], "second", max_tokens=3)
    stack.run()
    assert stack.scheduler.counters.prefill_tokens - before == 1
    assert stack.collector.token_ids("second") == solo_tokens(
        default_model_dir, [*PROMPT_33[:32], 4242], max_tokens=3
    )


def test_no_sharing_when_prefix_caching_is_off(default_model_dir: Path):
    stack = tiny_stack(default_model_dir, prefix_caching=False)
    for i in range(3):
        stack.submit(PROMPT_33, f"r{i}", max_tokens=2)
    stack.run()
    assert stack.scheduler.counters.prefill_tokens == 3 * 33
    assert stack.cache.stats().hit_tokens == 0


def test_n_choices_share_the_prompt_pages(default_model_dir: Path):
    stack = tiny_stack(default_model_dir)
    stack.submit(PROMPT_33, "multi", max_tokens=4, n=3)
    stack.scheduler.step()
    assert stack.cache.stats().pages_in_use == 8 + 3 * 1  # shared prefix + a private tail page each
    stack.run()
    texts = {stack.collector.text("multi", i) for i in range(3)}
    assert len(texts) == 1  # greedy choices agree
    assert [e.index for e in stack.collector.finished("multi")] == [0, 1, 2]
    assert stack.scheduler.counters.prefill_tokens == 33 + 2


@pytest.mark.slow  # seconds: the tiny model over the default tokenizer, many steps
def test_out_of_pages_preempts_the_newest_and_output_is_unchanged(default_model_dir: Path):
    prompts = [list(range(3000 + 50 * i, 3010 + 50 * i)) for i in range(3)]
    stack = tiny_stack(default_model_dir, num_pages=16)
    for i, prompt in enumerate(prompts):
        stack.submit(prompt, f"r{i}", max_tokens=30)
    stack.run()
    assert stack.scheduler.counters.preemptions >= 1
    for i, prompt in enumerate(prompts):
        assert stack.collector.token_ids(f"r{i}") == solo_tokens(
            default_model_dir, prompt, max_tokens=30
        )
    stats = stack.cache.stats()
    assert stats.pages_in_use == 0
    assert stats.pages_free + stats.pages_cached == 16


def test_sequence_finished_at_prefill_is_drained_without_a_decode(default_model_dir: Path):
    stack = tiny_stack(default_model_dir)
    stack.submit([1, 2, 3, 4, 5], "one", max_tokens=1)
    stack.run()
    assert stack.scheduler.counters.decode_steps == 0
    [last] = stack.collector.finished("one")
    assert last.finish_reason is FinishReason.LENGTH
    assert last.usage is not None and last.usage.completion_tokens == 1
    assert stack.cache.stats().pages_in_use == 0


def test_abort_while_waiting(default_model_dir: Path):
    stack = tiny_stack(default_model_dir, max_seqs=1)
    stack.submit([1, 2, 3], "running", max_tokens=50)
    stack.submit([4, 5, 6], "waiting", max_tokens=50)
    stack.scheduler.step()
    stack.scheduler.abort("waiting")
    stack.scheduler.step()
    assert [e.finish_reason for e in stack.collector.events["waiting"]] == [FinishReason.ABORT]
    assert len(stack.scheduler.waiting) == 0


def test_abort_mid_prefill_frees_pages_within_one_step(default_model_dir: Path):
    stack = tiny_stack(default_model_dir, budget=8)
    stack.submit(list(range(100, 140)), "long", max_tokens=5)
    stack.scheduler.step()
    assert stack.cache.stats().pages_in_use == 10
    stack.scheduler.abort("long")
    stack.scheduler.step()
    assert stack.cache.stats().pages_in_use == 0
    assert stack.collector.finished("long")[0].finish_reason is FinishReason.ABORT
    assert not stack.scheduler.has_work()


def test_abort_while_decoding_stops_tokens_and_frees_pages(default_model_dir: Path):
    stack = tiny_stack(default_model_dir)
    stack.submit(list(range(100, 110)), "decoding", max_tokens=100)
    for _ in range(3):
        stack.scheduler.step()
    produced = len(stack.collector.events["decoding"])
    stack.scheduler.abort("decoding")
    stack.scheduler.step()
    events = stack.collector.events["decoding"]
    assert len(events) == produced + 1
    assert events[-1].finish_reason is FinishReason.ABORT and events[-1].token_ids == ()
    assert stack.cache.stats().pages_in_use == 0


def test_abort_of_a_prefix_owner_lets_its_sharer_finish_correctly(default_model_dir: Path):
    stack = tiny_stack(default_model_dir, budget=8)
    stack.submit(PROMPT_33, "owner", max_tokens=3)
    stack.submit(PROMPT_33, "sharer", max_tokens=3)
    stack.scheduler.step()  # the owner computed 8 of its tokens; the sharer waits for more
    stack.scheduler.abort("owner")
    stack.run()
    assert stack.collector.token_ids("sharer") == solo_tokens(
        default_model_dir, PROMPT_33, max_tokens=3
    )
    assert stack.cache.stats().pages_in_use == 0
    # Only the owner's first page (8 tokens) was computed for it; the sharer computed the
    # rest itself, and neither its usage nor the cache counts those as hits.
    [end] = stack.collector.finished("sharer")
    assert end.usage is not None and end.usage.cached_tokens == 8
    assert stack.cache.stats().hit_tokens == 8


def test_stop_token_id_ends_the_choice_without_its_text(default_model_dir: Path):
    reference = solo_tokens(default_model_dir, [9, 8, 7], max_tokens=8)
    stop_at = next(i for i, t in enumerate(reference) if t not in reference[:i] and i >= 2)
    stack = tiny_stack(default_model_dir)
    stack.submit([9, 8, 7], "r", max_tokens=8, stop_token_ids=[reference[stop_at]])
    stack.run()
    assert stack.collector.token_ids("r") == reference[: stop_at + 1]
    [last] = stack.collector.finished("r")
    assert (last.finish_reason, last.stop, last.text) == (
        FinishReason.STOP,
        reference[stop_at],
        "",
    )


def test_min_tokens_bans_stop_tokens_until_reached(default_model_dir: Path):
    reference = solo_tokens(default_model_dir, [9, 8, 7], max_tokens=1)
    stack = tiny_stack(default_model_dir)
    stack.submit([9, 8, 7], "r", max_tokens=6, min_tokens=3, stop_token_ids=[reference[0]])
    stack.run()
    tokens = stack.collector.token_ids("r")
    assert reference[0] not in tokens[:3]
    assert len(tokens) >= 4 or stack.collector.finished("r")[0].finish_reason is FinishReason.LENGTH


def test_stop_string_cuts_text_before_it(default_model_dir: Path):
    stack = tiny_stack(default_model_dir)
    stack.submit([11, 12, 13], "ref", max_tokens=10)
    stack.run()
    full = stack.collector.text("ref")
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip()
    stack.submit([11, 12, 13], "r", max_tokens=10, stop=[stop])
    stack.run()
    [last] = stack.collector.finished("r")
    assert (last.finish_reason, last.stop) == (FinishReason.STOP, stop)
    assert stack.collector.text("r") == full[: full.index(stop)]


def test_context_limit_ends_with_length(default_model_dir: Path):
    stack = tiny_stack(default_model_dir, num_pages=128)
    prompt = list(range(5000, 5250))  # the tiny model's context is 256
    stack.submit(prompt, "r")
    stack.run()
    assert len(stack.collector.token_ids("r")) == 6
    assert stack.collector.finished("r")[0].finish_reason is FinishReason.LENGTH


@pytest.mark.slow  # seconds: the tiny model over the default tokenizer, many steps
def test_seeded_sampling_is_the_same_alone_and_in_a_batch(default_model_dir: Path):
    sampled = {"temperature": 0.9, "top_p": 0.95, "seed": 1234, "max_tokens": 10}
    alone = solo_tokens(default_model_dir, [5, 6, 7], **sampled)
    stack = tiny_stack(default_model_dir)
    stack.submit([1, 2, 3, 4, 5, 6], "other0", temperature=1.0, max_tokens=10)
    stack.submit([5, 6, 7], "seeded", **sampled)
    stack.submit([9], "other1", temperature=0.7, seed=99, max_tokens=10)
    stack.run()
    assert stack.collector.token_ids("seeded") == alone


def test_a_failed_forward_fails_live_requests_and_the_loop_serves_on(default_model_dir: Path):
    stack = tiny_stack(default_model_dir)
    forward = stack.scheduler.runner.forward
    failures = iter([RuntimeError("device lost")])

    def flaky(chunks):
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return forward(chunks)

    stack.scheduler.runner.forward = flaky  # type: ignore[method-assign]
    finished = {"doomed": threading.Event(), "after": threading.Event()}

    def sink(event):
        stack.collector(event)
        if event.finish_reason is not None:
            finished[event.request_id].set()

    params = SamplingParams(temperature=0, max_tokens=3)
    stack.scheduler.start()
    try:
        stack.scheduler.add(stack.requests.build("doomed", [1, 2, 3], params, sink))
        assert finished["doomed"].wait(30)
        stack.scheduler.add(stack.requests.build("after", [1, 2, 3], params, sink))
        assert finished["after"].wait(30)
    finally:
        stack.scheduler.stop()
    [failed] = stack.collector.finished("doomed")
    assert failed.finish_reason is FinishReason.ERROR and failed.error == "device lost"
    assert len(stack.collector.token_ids("after")) == 3
    assert stack.cache.stats().pages_in_use == 0
