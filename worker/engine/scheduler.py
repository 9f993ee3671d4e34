"""Scheduler: decides each step's StepPlan and turns its StepOutput into events, model-free."""

from __future__ import annotations

import contextlib
from collections import deque

import torch

from common.token_output import FinishReason
from worker.engine.drafting import Drafter, DraftRounds, DraftRows
from worker.engine.output_processor import OutputProcessor
from worker.engine.prefill_pace import PrefillPace
from worker.engine.scheduler_config import SchedulerConfig, SchedulerCounters
from worker.engine.sequence import Events, RequestStatus, Sequence
from worker.engine.step_plan import Chunk, Delivery, HiddenRows, StepOutput, StepPlan, decode_chunks
from worker.kv.base import KVCache
from worker.sampling.sampler import SampleOutput

# Invariants, held between steps (the status of each sequence says where it is, see
# RequestStatus): every sequence is in EngineCore's inbox, in `waiting` (WAITING or
# PREEMPTED, no pages) or in `running` (PREFILLING or DECODING, holding the pages of
# token_ids[:num_computed] and of what it computes next); FINISHED ones leave `running` at
# the next schedule. A sequence gives its pages back the moment it finishes, before its last
# event is emitted; an abort takes effect at the next schedule. The KV cache is called in the
# order KVCache (worker/kv/base.py) states, from schedule and the updates only.


class Scheduler:
    """Which sequences feed which tokens each step (schedule), and what their sampled tokens
    do to them (update, and update_drafts for each later round of a drafted step); the
    forward and every sampling in between are StepExecutor's."""

    def __init__(
        self, cache: KVCache, processor: OutputProcessor, config: SchedulerConfig | None = None
    ) -> None:
        self.cache = cache
        self.processor = processor
        self.config = config or SchedulerConfig()
        self.counters = SchedulerCounters()
        self.drafter = Drafter(self.config.speculative_tokens)
        self.pace = PrefillPace(self.config.prefill_step_s, self.config.prefill_token_budget)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._prefilled_last = False  # the last plan fed prompts (steps that do not mix)
        self._drafted: DraftRounds | None = None  # a drafted step between its rounds

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- schedule ----------------------------------------------------------------------
    def schedule(self, delivery: Delivery) -> StepPlan:
        """Take what arrived, admit what fits, and plan one forward.

        Room for the decoding sequences comes first: making it may preempt the newest ones,
        which must not be handed a prompt chunk this step. A step feeds prompt chunks when
        there are any, decoding rows riding along (mixed steps); otherwise it decodes, with
        drafts. Without mixed steps, prompt and decode forwards alternate while both wait.
        The plan's `kv` lists the pages each sequence was given on the way.
        """
        self.cache.begin_step()
        aborted = self._take(delivery)
        self._refill()
        decoding, preempted = self._decoders_with_room()
        alternate = not self.config.mixed_steps and decoding and self._prefilled_last
        prompts, chunks = ([], []) if alternate else self._plan_prefill(len(decoding))
        self._prefilled_last = bool(chunks)
        if chunks:
            riding = decoding if self.config.mixed_steps else []
            rows = [c for s in riding for c in decode_chunks(s, ())]
            sampled = [s for s, c in zip(prompts, chunks, strict=True) if c.wants_logits]
            return StepPlan(
                prompts=tuple(prompts),
                prompt_chunks=tuple(chunks),
                decodes=tuple(riding),
                drafts=(),
                chunks=(*chunks, *rows),
                samples=(*sampled, *riding),
                preempted=preempted,
                aborted=aborted,
                kv=self.cache.step_plan(),
            )
        drafts = self.drafter.propose(decoding, self.cache) if decoding else ()
        drafted = drafts or ((),) * len(decoding)
        rows = [c for s, d in zip(decoding, drafted, strict=True) for c in decode_chunks(s, d)]
        return StepPlan(
            decodes=tuple(decoding),
            drafts=drafts,
            chunks=tuple(rows),
            samples=tuple(decoding),
            preempted=preempted,
            aborted=aborted,
            kv=self.cache.step_plan(),
        )

    def _take(self, delivery: Delivery) -> tuple[Sequence, ...]:
        """Queue arrivals and end the aborted; finished sequences leave `running`."""
        arrived, aborts, everything = delivery
        for choices in arrived:
            self.waiting.extend(choices)
            self.counters.total_tasks += 1
        if everything:
            aborts = aborts | {s.request_id for s in [*self.waiting, *self.running]}
        aborted: list[Sequence] = []
        if aborts:
            for seq in [s for s in self.waiting if s.request_id in aborts]:
                self.waiting.remove(seq)
                seq.finish(FinishReason.ABORT)
                aborted.append(seq)
            for seq in self.running:
                if seq.request_id in aborts and not seq.is_finished:
                    self.cache.release(seq.seq_id)
                    seq.finish(FinishReason.ABORT)
                    aborted.append(seq)
        # Finished sequences gave their pages back when they finished (see _append).
        self.running = [s for s in self.running if not s.is_finished]
        return tuple(aborted)

    def _refill(self) -> None:
        """Admit in arrival order while slots and pages allow; the head waits otherwise."""
        while self.waiting and len(self.running) < self.config.max_seqs:
            seq = self.waiting[0]
            admission = self.cache.admit(seq.seq_id, seq.token_ids, seq.reuses_prefix)
            if admission is None:
                return
            self.waiting.popleft()
            if seq.status is RequestStatus.WAITING:  # hits count at first admission only
                seq.num_cached_tokens = admission.num_shared_tokens
                seq.num_cache_written_tokens = self.cache.cache_written_tokens(seq.seq_id)
            seq.num_computed = admission.num_cached_tokens
            seq.move_to(RequestStatus.PREFILLING)
            self.running.append(seq)

    def _decoders_with_room(self) -> tuple[list[Sequence], tuple[Sequence, ...]]:
        """Every decoding sequence with pages for its next token, oldest first, and the
        newest sequences preempted to make that room (they leave `running` after the loop,
        so no list changes while it is read)."""
        ready: list[Sequence] = []
        preempted: list[Sequence] = []
        for seq in [s for s in self.running if s.status is RequestStatus.DECODING]:
            if seq.status is not RequestStatus.DECODING:
                continue  # preempted while making room for an older sequence
            while not self.cache.grow(seq.seq_id, len(seq.token_ids)):
                victim = next(s for s in reversed(self.running) if s.status.is_running)
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            else:
                ready.append(seq)
        if preempted:
            self.running = [s for s in self.running if s.status.is_running]
            self.waiting.extendleft(preempted)  # the oldest of them first
        return ready, tuple(preempted)

    def _preempt(self, seq: Sequence) -> None:
        """Free everything; it recomputes its prompt and output once readmitted."""
        self.cache.release(seq.seq_id)
        seq.num_computed = 0
        seq.move_to(RequestStatus.PREEMPTED)
        self.counters.preemptions += 1

    def prompt_budget(self, decode_rows: int) -> int:
        """Prompt tokens a step may feed while `decode_rows` streams decode: the idle budget
        while none does (nobody waits), else the pace's."""
        return self.pace.budget(decode_rows) if decode_rows else self.config.most_prompt_tokens

    def _plan_prefill(self, decode_rows: int) -> tuple[list[Sequence], list[Chunk]]:
        """Uncomputed prompt tokens of several sequences, under the step's budget, and whose."""
        budget, least = self.prompt_budget(decode_rows), self.config.prefill_token_budget
        chunks: list[Chunk] = []
        seqs: list[Sequence] = []
        for seq in self.running:
            if budget == 0:
                break
            if seq.status is not RequestStatus.PREFILLING:
                continue
            start = self.cache.shared_ready(seq.seq_id, seq.num_computed)
            if start is None:
                continue  # its prefix is being computed by another sequence: next step
            # Below its shared length only when it adopted pages an aborted owner left
            # uncomputed: those tokens are its own work, not cache hits.
            seq.num_cached_tokens = min(seq.num_cached_tokens, start)
            seq.num_computed = start
            room = least if seq.records_prompt_logprobs else budget  # logits for every token
            end = min(len(seq.token_ids), start + room)
            self.cache.plan(seq.seq_id, start, end)
            pooled, length = seq.embedding, len(seq.token_ids)
            chunks.append(
                Chunk(
                    seq.seq_id,
                    start,
                    seq.token_ids[start:end],
                    wants_logits=end == length and pooled is None,  # an embedding samples none
                    all_logits=seq.records_prompt_logprobs,
                    hidden=HiddenRows(pooled.hidden(start, end, length) if pooled else "none"),
                    prompt=True,
                )
            )
            seqs.append(seq)
            budget -= end - start
        return seqs, chunks

    # -- update ------------------------------------------------------------------------
    def update(self, plan: StepPlan, output: StepOutput) -> Events:
        """Commit what the forward computed, append the sampled tokens (a drafted step's first
        round: update_drafts takes the others), finish whoever stopped; the events, in order."""
        events: Events = [(seq, seq.end_event()) for seq in plan.aborted]
        if output.prompt_logits:  # recorded first: a first token's event carries them
            kept = zip(plan.prompts, plan.prompt_chunks, output.prompt_logits, strict=True)
            for seq, chunk, logits in kept:
                if logits is not None:
                    self.processor.record_prompt_logprobs(seq, chunk.start, logits)
        for seq, chunk in zip(plan.prompts, plan.prompt_chunks, strict=True):
            seq.num_computed = chunk.end
            self.cache.commit(seq.seq_id, seq.token_ids, seq.num_computed)
        self.counters.prefill_tokens += plan.num_prompt_tokens
        self.counters.decode_steps += 1 if plan.decodes else 0
        for seq in plan.decodes:
            seq.num_computed = len(seq.token_ids)
            self.cache.commit(seq.seq_id, seq.token_ids, seq.num_computed)
        events += self._pool(plan, output.hidden or (None,) * len(plan.prompts))
        if plan.has_drafts:  # round 0 of its verification; its events come with the last
            self._drafted = DraftRounds(plan)
            return events + self.update_drafts(output.sampled)
        events += self._append(list(plan.samples), output.sampled)
        self.drafter.observe_guesses(plan.decodes, plan.drafts)
        return events

    @property
    def draft_rows(self) -> DraftRows | None:
        """What a drafted step samples next, while any of its drafts is kept so far; else None."""
        return None if self._drafted is None else self._drafted.next_rows()

    def update_drafts(self, sampled: SampleOutput) -> Events:
        """Append one round of a drafted step (a token per `draft_rows` sequence); once none
        goes on, the pages of what was kept are committed and its decodes' events returned."""
        rounds = self._drafted
        assert rounds is not None
        if rounds.record(self._append(rounds.alive, sampled)):
            return []
        self._drafted = None
        return rounds.finish(self.cache, self.counters)

    def _append(self, seqs: list[Sequence], sampled: SampleOutput) -> Events:
        """One sampled token per sequence (row i is seqs[i]), appended; finished ones give
        their pages back before their last event is emitted, so its receiver sees them free."""
        events = []
        for i, seq in enumerate(seqs):
            if seq.status is RequestStatus.PREFILLING:
                seq.move_to(RequestStatus.DECODING)
            event = self.processor.append_token(
                seq, sampled.token_ids[i], sampled.logprobs[i], sampled.top_logprobs[i]
            )
            self.counters.total_tokens += 1
            if event.finish_reason is not None:
                seq.finish(event.finish_reason)
                self.cache.release(seq.seq_id)
                self.counters.finished_tasks += 1
            events.append((seq, event))
        return events

    def _pool(self, plan: StepPlan, hidden: tuple[torch.Tensor | None, ...]) -> Events:
        """Each embedding's (or reranked document's) kept rows pooled; one whose input is all
        computed ends with its vector (or score), its pages given back before the event, as a
        finished choice's are."""
        events: Events = []
        for seq, chunk, rows in zip(plan.prompts, plan.prompt_chunks, hidden, strict=True):
            pooled = seq.embedding
            if pooled is None:
                continue
            if rows is not None:
                pooled.add(chunk.start, rows)
            if chunk.end == len(seq.token_ids):
                seq.finish(FinishReason.STOP)
                self.cache.release(seq.seq_id)
                self.counters.count_pooled(pooled.head is not None)
                events.append((seq, seq.end_event().carrying(pooled)))
        return events

    def fail_all(self, arrived: list[list[Sequence]], exc: BaseException) -> Events:
        """End every live sequence (and those just `arrived`) with an error; their events."""
        self._drafted = None  # a drafted step that failed between its rounds
        pending = [s for choices in arrived for s in choices] + list(self.waiting)
        self.waiting.clear()
        for seq in self.running:
            # Finished ones gave their pages back already, as may have one preempted when
            # the step failed.
            with contextlib.suppress(KeyError):
                self.cache.release(seq.seq_id)
        live = [s for s in self.running if not s.is_finished] + pending
        self.running = []
        error = str(exc) or type(exc).__name__
        events = []
        for seq in live:
            seq.finish(FinishReason.ERROR)
            events.append((seq, seq.end_event(error)))
        return events
