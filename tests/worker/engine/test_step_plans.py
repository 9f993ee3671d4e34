"""Scheduler.schedule and update without a model: the exact plan of each step, fed the
sampled ids each test chooses (as vLLM's scheduler tests feed ModelRunnerOutput)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from common.token_output import FinishReason
from tests.worker.engine.plan_bench import ids, plan_bench
from worker.engine.sequence import RequestStatus
from worker.engine.speculation import DecodeCost
from worker.engine.step_plan import Chunk, StepOutput
from worker.kv.base import KVStepPlan, NewPages, ReadInPlace
from worker.kv.paged import PageCache

PROMPT_33 = list(range(1000, 1033))  # 8 full pages of 4 and one token over


def decode_row(seq_id: int, start: int, token: int) -> Chunk:
    return Chunk(seq_id, start, [token], True)


def test_a_long_prompt_is_chunked_and_a_running_stream_rides_in_each_chunk(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, budget=8)
    short, long_ = [5, 6, 7, 8, 9], list(range(100, 112))
    bench.submit(short, "short")
    bench.submit(long_, "long")
    plan = bench.step(300)
    assert plan.chunks == (
        Chunk(0, 0, short, True, prompt=True),
        Chunk(1, 0, long_[:3], False, prompt=True),
    )
    assert ids(plan.samples) == [0]
    plan = bench.step(301)
    assert plan.chunks == (Chunk(1, 3, long_[3:11], False, prompt=True), decode_row(0, 5, 300))
    assert ids(plan.samples) == [0] and ids(plan.decodes) == [0]
    plan = bench.step(400, 302)
    assert plan.chunks == (Chunk(1, 11, long_[11:], True, prompt=True), decode_row(0, 6, 301))
    assert ids(plan.samples) == [1, 0]
    plan = bench.schedule()
    assert plan.is_decode_only and plan.prompt_chunks == ()
    assert plan.chunks == (decode_row(0, 7, 302), decode_row(1, 12, 400))


def test_a_prompt_takes_the_idle_budget_only_while_no_stream_decodes(default_model_dir: Path):
    bench = plan_bench(default_model_dir, budget=4, idle_budget=16)
    long_, other = list(range(100, 120)), [5, 6, 7, 8, 9, 10]
    bench.submit(long_, "long")
    assert bench.step().chunks == (Chunk(0, 0, long_[:16], False, prompt=True),)
    assert bench.step(300).chunks == (Chunk(0, 16, long_[16:], True, prompt=True),)
    bench.submit(other, "other")
    plan = bench.step(301)  # "long" decodes now: its next token waits for this step
    assert plan.chunks == (Chunk(1, 0, other[:4], False, prompt=True), decode_row(0, 20, 300))
    assert bench.step(400, 302).chunks == (
        Chunk(1, 4, other[4:], True, prompt=True),
        decode_row(0, 21, 301),
    )


def test_a_paced_step_feeds_the_prompt_tokens_that_fit_its_time_up_to_the_budget(
    default_model_dir: Path,
):
    bench = plan_bench(
        default_model_dir, num_pages=128, budget=128, idle_budget=512, prefill_step_s=0.1
    )
    pace = bench.scheduler.pace
    assert pace is not None and pace.budget(decode_rows=1) == 128  # nothing timed yet
    bench.submit([5, 6, 7], "short", max_tokens=3)
    bench.step(300)
    pace.observe(rows=200, seconds=0.2)  # 1 ms a row: 100 rows in 0.1 s, one of them "short"
    long_ = list(range(100, 300))
    bench.submit(long_, "long")
    plan = bench.step(301)
    assert plan.chunks == (Chunk(1, 0, long_[:96], False, prompt=True), decode_row(0, 3, 300))
    pace.observe(rows=100, seconds=0.1)
    pace.observe(rows=100, seconds=1.9)  # dearer rows (a longer context): 10 ms a row
    plan = bench.step(302)
    assert plan.chunks == (Chunk(1, 96, long_[96:160], False, prompt=True), decode_row(0, 4, 301))
    # "short" has its three tokens: nobody waits, the idle budget.
    assert bench.step(400).chunks == (Chunk(1, 160, long_[160:], True, prompt=True),)
    for _ in range(10):  # fast steps: never more than the budget
        pace.observe(rows=100, seconds=0.001)
    assert pace.budget(decode_rows=1) == 128


def test_a_prompt_that_records_its_logprobs_keeps_the_usual_chunk(default_model_dir: Path):
    """Its chunks take logits for every token: the idle budget would multiply them."""
    bench = plan_bench(default_model_dir, budget=4, idle_budget=16)
    prompt = list(range(100, 110))
    bench.submit(prompt, "echo", prompt_logprobs=1)
    assert bench.step().chunks == (Chunk(0, 0, prompt[:4], False, True, prompt=True),)


def test_without_mixed_steps_prompt_and_decode_forwards_take_turns(default_model_dir: Path):
    bench = plan_bench(default_model_dir, budget=8, mixed_steps=False)
    bench.submit([5, 6, 7], "short")
    assert bench.step(300).chunks == (Chunk(0, 0, [5, 6, 7], True, prompt=True),)
    long_ = list(range(100, 120))
    bench.submit(long_, "long")
    assert bench.step(301).chunks == (decode_row(0, 3, 300),)  # a prompt forward came last
    assert bench.step().chunks == (Chunk(1, 0, long_[:8], False, prompt=True),)
    assert bench.step(302).chunks == (decode_row(0, 4, 301),)
    assert bench.step().chunks == (Chunk(1, 8, long_[8:16], False, prompt=True),)


def test_the_newest_sequence_is_preempted_for_an_older_ones_page_and_recomputes_later(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, num_pages=4)
    [old] = bench.submit([10, 11, 12, 13, 14, 15, 16], "old", max_tokens=3)
    [new] = bench.submit([20, 21, 22, 23, 24, 25, 26], "new", max_tokens=5)
    plan = bench.step(300, 301)  # both prompts: every page in use
    assert plan.kv.allocated == (NewPages(0, (0, 1)), NewPages(1, (2, 3)))
    plan = bench.step(302, 303)
    assert plan.chunks == (decode_row(0, 7, 300), decode_row(1, 7, 301))
    assert plan.kv.allocated == ()  # their 8th tokens still fit their second pages
    # The old one's 9th token needs a third page: the new one gives its pages back.
    plan = bench.step(304)
    assert ids(plan.preempted) == [1] and plan.chunks == (decode_row(0, 8, 302),)
    assert plan.kv.allocated == (NewPages(0, (3,)),)  # the new one's partial page, freed
    assert new.status is RequestStatus.PREEMPTED and new.num_computed == 0
    assert old.finish_reason is FinishReason.LENGTH  # its third token: its pages are free
    # Readmitted, it recomputes its prompt and output from its first page, still cached.
    plan = bench.step(305)
    assert plan.chunks == (Chunk(1, 4, [24, 25, 26, 301, 303], True, prompt=True),)
    # Past its cached first page (2): the free page, then the least recently cached one.
    assert plan.kv.allocated == (NewPages(1, (3, 1)),) and bench.cache.pages_of(1) == [2, 3, 1]
    assert new.status is RequestStatus.DECODING and new.output_token_ids == [301, 303, 305]
    assert new.num_cached_tokens == 0  # hits count at the first admission only
    assert bench.scheduler.counters.preemptions == 1


def test_a_finished_prompt_is_a_prefix_hit_for_the_next_one(default_model_dir: Path):
    bench = plan_bench(default_model_dir)
    bench.submit(PROMPT_33, "first", max_tokens=1)
    assert bench.step(300).chunks == (Chunk(0, 0, PROMPT_33, True, prompt=True),)
    [again] = bench.submit(PROMPT_33, "again", max_tokens=1)
    assert bench.step(300).chunks == (Chunk(1, 32, PROMPT_33[32:], True, prompt=True),)
    assert again.num_cached_tokens == 32
    assert bench.scheduler.counters.prefill_tokens == 33 + 1


def test_a_sharer_waits_for_the_pages_its_owner_computes_then_computes_its_tail(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, budget=8)
    bench.submit(PROMPT_33, "owner")
    bench.submit(PROMPT_33, "sharer")
    owner_pages: list[int] = []
    for start in (0, 8, 16, 24):  # the sharer's next page is planned for a later step
        plan = bench.step()
        assert plan.chunks == (Chunk(0, start, PROMPT_33[start : start + 8], False, prompt=True),)
        owner_pages = bench.cache.pages_of(0)
        computed = frozenset(owner_pages[start // 4 : start // 4 + 2])
        # Both were given every page they need at admission: the sharer only its last own.
        allocated = (NewPages(0, tuple(owner_pages)), NewPages(1, (9,))) if start == 0 else ()
        assert plan.kv == KVStepPlan(allocated, computed)
    assert bench.cache.pages_of(1) == [*owner_pages[:8], 9]
    plan = bench.step(300, 300)
    assert plan.chunks == (
        Chunk(0, 32, PROMPT_33[32:], True, prompt=True),
        Chunk(1, 32, PROMPT_33[32:], True, prompt=True),
    )
    assert bench.scheduler.counters.prefill_tokens == 33 + 1


def test_sharers_arriving_together_read_a_partial_page_where_its_owner_computes_it(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir)
    shared = list(range(1000, 1030))  # 7 full pages of 4 and two tokens over
    prompts = [[*shared, *range(3000 + 10 * i, 3003 + 10 * i)] for i in range(3)]
    for i, prompt in enumerate(prompts):
        bench.submit(prompt, f"r{i}")
    plan = bench.schedule()
    # The others' two rows past the shared full pages are read in the owner's page, in
    # this forward, and copied into their own pages when it is committed.
    assert plan.chunks == (
        Chunk(0, 0, prompts[0], True, prompt=True),
        Chunk(1, 30, prompts[1][30:], True, prompt=True),
        Chunk(2, 30, prompts[2][30:], True, prompt=True),
    )
    owner_pages = bench.cache.pages_of(0)
    assert (
        plan.kv
        == KVStepPlan(
            allocated=(  # the others hold the owner's full pages, and two pages of their own
                NewPages(0, tuple(owner_pages)),
                NewPages(1, tuple(bench.cache.pages_of(1)[7:])),
                NewPages(2, tuple(bench.cache.pages_of(2)[7:])),
            ),
            computed_pages=frozenset(owner_pages[:8]),  # the owner's full pages, read as computed
            reads_in_place=(
                ReadInPlace(1, owner_pages[7], position=28, num_rows=2),
                ReadInPlace(2, owner_pages[7], position=28, num_rows=2),
            ),
        )
    )
    bench.update(plan, 300, 301, 302)
    assert [bench.cache.table.get(i).read_from for i in (1, 2)] == [None, None]
    assert bench.cache.stats().hit_tokens == 2 * 30


def test_an_abort_ends_a_sequence_at_the_next_schedule_and_frees_its_pages(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, budget=8)
    [seq] = bench.submit(list(range(100, 140)), "long")
    bench.step()
    assert bench.cache.stats().pages_in_use == 10
    bench.aborts.add("long")
    plan = bench.schedule()
    assert ids(plan.aborted) == [0] and plan.chunks == ()
    assert seq.status is RequestStatus.FINISHED and bench.cache.stats().pages_in_use == 0
    [event] = bench.update(plan)
    assert event.finish_reason is FinishReason.ABORT and event.token_ids == ()
    assert not bench.scheduler.has_work


def test_drafts_ride_as_rows_and_the_kept_ones_become_computed_context(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, speculative_tokens=3)
    bench.scheduler.drafter.cost = DecodeCost((1, 2), (1.0, 1.0))  # every row free
    prompt = [7, 8, 9, 10, 7, 8, 9, 10, 7, 8, 9]
    [seq] = bench.submit(prompt, "echo", max_tokens=10)
    bench.step(10)
    plan = bench.schedule()
    assert plan.drafts == ((7, 8, 9),)  # what followed the last 7, 8, 9, 10
    assert plan.kv.allocated == (NewPages(0, (3,)),)  # the drafts' rows: a fourth page
    assert plan.chunks == tuple(decode_row(0, 11 + i, t) for i, t in enumerate((10, 7, 8, 9)))
    bench.sampler.script = [8, 5]  # after the first draft kept: the second kept, not the third
    output = StepOutput.of_tokens([7])
    decode_logits = torch.zeros(4, 1)
    events = bench.update_drafted(plan, StepOutput(output.sampled, (), decode_logits))
    assert [e.token_ids for _, e in events] == [(7, 8, 5)]  # one event for the step
    assert seq.num_computed == 14 and seq.token_ids[11:] == [10, 7, 8, 5]
    counters = bench.scheduler.counters
    assert (counters.draft_tokens, counters.accepted_draft_tokens) == (3, 2)
    assert bench.schedule().chunks[0] == decode_row(0, 14, 5)


class RecordingCache(PageCache):
    """A PageCache that notes each step-protocol call, with the sequence it is for."""

    calls: list[str]

    def admit(self, seq_id: int, tokens: Any, reuse_prefix: bool = True) -> Any:
        self.calls.append(f"admit {seq_id}")
        return super().admit(seq_id, tokens, reuse_prefix)

    def grow(self, seq_id: int, num_tokens: int) -> bool:
        self.calls.append(f"grow {seq_id}")
        return super().grow(seq_id, num_tokens)

    def release(self, seq_id: int) -> None:
        self.calls.append(f"release {seq_id}")
        super().release(seq_id)

    def begin_step(self) -> None:
        self.calls.append("begin_step")
        super().begin_step()

    def shared_ready(self, seq_id: int, start: int) -> int | None:
        self.calls.append(f"shared_ready {seq_id}")
        return super().shared_ready(seq_id, start)

    def plan(self, seq_id: int, start: int, end: int) -> None:
        self.calls.append(f"plan {seq_id}")
        super().plan(seq_id, start, end)

    def step_plan(self) -> KVStepPlan:
        self.calls.append("step_plan")
        return super().step_plan()

    def commit(self, seq_id: int, tokens: Any, num_computed: int) -> None:
        self.calls.append(f"commit {seq_id}")
        super().commit(seq_id, tokens, num_computed)


def test_the_kv_cache_step_protocol_runs_in_its_stated_order(default_model_dir: Path):
    """The order Scheduler states (and KVCache documents): partial-page sharing relies on
    planning after every decode row has its page and committing after the forward, and the
    plan lists every page given out only when it is asked last."""
    bench = plan_bench(default_model_dir, speculative_tokens=2, cache_class=RecordingCache)
    cache = bench.cache
    assert isinstance(cache, RecordingCache)
    cache.calls = []
    bench.submit([7, 8, 9, 7, 8], "old", max_tokens=4)
    bench.step(9)
    assert cache.calls == [
        *("begin_step", "admit 0", "shared_ready 0", "plan 0", "step_plan", "commit 0"),
    ]
    cache.calls = []
    bench.submit([20, 21, 22], "new", max_tokens=1)
    bench.step(300, 7)  # new's only token ends it
    assert cache.calls == [
        *("begin_step", "admit 1", "grow 0"),  # refill, then room for each decode row
        *("shared_ready 1", "plan 1", "step_plan"),  # each prompt chunk, then the plan
        *("commit 1", "commit 0", "release 1"),  # after the forward; the finished let go
    ]
    cache.calls = []
    bench.scheduler.drafter.cost = DecodeCost((1, 2), (1.0, 1.0))
    plan = bench.schedule()
    assert plan.drafts == ((8,),)  # one: its room left
    bench.sampler.script = [9]
    output = StepOutput(StepOutput.of_tokens([8]).sampled, (), torch.zeros(2, 1))
    bench.update_drafted(plan, output)  # its draft kept, the token after it its last
    assert cache.calls == [
        *("begin_step", "grow 0", "grow 0", "step_plan"),  # its row, no prompt, its drafts'
        *("commit 0", "release 0"),  # what the forward computed; finished in the drafts
    ]


def test_a_status_moves_only_as_request_status_allows(default_model_dir: Path):
    bench = plan_bench(default_model_dir)
    [seq] = bench.submit([1, 2, 3], "one", max_tokens=1)
    with pytest.raises(AssertionError, match="WAITING -> DECODING"):
        seq.move_to(RequestStatus.DECODING)  # never admitted
    bench.step(300)
    assert seq.status is RequestStatus.FINISHED and seq.finish_reason is FinishReason.LENGTH
    with pytest.raises(AssertionError, match="FINISHED -> PREFILLING"):
        seq.move_to(RequestStatus.PREFILLING)
