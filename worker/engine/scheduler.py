"""InferenceScheduler: the continuous-batching step, cleanup → refill → prefill → decode."""

from __future__ import annotations

import contextlib
import time
from collections import deque

import torch

from common.token_output import FinishReason
from worker.engine.drafted_decode import DraftedDecode
from worker.engine.output_processor import OutputProcessor
from worker.engine.runner import Chunk, ModelRunner
from worker.engine.scheduler_config import SchedulerConfig, SchedulerCounters
from worker.engine.scheduler_loop import SchedulerLoop, call_safely
from worker.engine.sequence import Sequence, TokenEvent
from worker.kv.base import KVCache
from worker.sampling.grammar import GrammarMasks
from worker.sampling.sampler import sample_rows

# Invariants, held between steps:
# - Every sequence is in exactly one place: the inbox, `waiting` (holds no pages) or
#   `running` (holds the pages of its token_ids[:num_computed] and of what it will compute).
# - A running sequence either prefills (feeds up to the token budget of its uncomputed
#   tokens per step) or decodes (feeds its last sampled token, and after it the drafted
#   guesses that pay, see DraftedDecode); see Sequence.
# - A sequence gives its pages back the moment it finishes, before its last event is
#   emitted; an abort takes effect at the next cleanup, within one iteration.


class InferenceScheduler(DraftedDecode, SchedulerLoop):
    """The step and the state it owns; the thread it runs on and the calls other threads make
    into it come from SchedulerLoop, the drafted tokens of a decode step from DraftedDecode."""

    def __init__(
        self,
        runner: ModelRunner,
        cache: KVCache,
        processor: OutputProcessor,
        config: SchedulerConfig | None = None,
    ) -> None:
        self.runner = runner
        self.cache = cache
        self.processor = processor
        self.config = config or SchedulerConfig()
        super().__init__(self.config.idle_wait_s)
        self.counters = SchedulerCounters()
        tokenizer = processor.tokenizer
        self.grammar_masks = GrammarMasks(
            lambda ids: tokenizer.decode(ids, skip_special_tokens=False), tokenizer.eos_token_ids
        )
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    # -- state -----------------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.inbox.has_pending() or self.waiting or self.running)

    @property
    def num_running(self) -> int:
        return sum(1 for s in list(self.running) if not s.is_finished)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + self.inbox.num_arrived

    @torch.inference_mode()
    def step(self) -> None:
        """One iteration; no I/O inside, events go to each sequence's sink."""
        self._cleanup()
        self._refill()
        # Room for the decoding sequences first: making it may preempt the newest ones,
        # which must not be handed a prompt chunk this step.
        decoding = self._ready_to_decode()
        chunks, prefilling = self._plan_prefill()
        if chunks and decoding and self.config.mixed_steps:
            self._prefill(chunks, prefilling, decoding)
            return
        if chunks and self._prefill(chunks, prefilling, []):
            # Their first tokens leave now: the decode forward would hold them back for its
            # whole time (17-52 ms of W2's TTFT over HTTP on a 2-core Xeon, measured).
            self._flush()
            if self.config.mixed_steps and self._prompts_left():
                # The new decoders ride in the next prompt chunk's forward instead: a decode
                # forward of their own first held that chunk back (26 ms at 13 rows, W2).
                return
        self._decode(self._ready_to_decode() if chunks else decoding)

    def _prompts_left(self) -> bool:
        """Whether prompt tokens are still to be computed, here or in the waiting queue."""
        return bool(self.waiting) or any(s.is_prefilling for s in self.running)

    # -- phase 1 ----------------------------------------------------------------------
    def _cleanup(self) -> None:
        arrived, aborts, everything = self.inbox.take()
        for choices in arrived:
            self.waiting.extend(choices)
            self.counters.total_tasks += 1
        if everything:
            aborts |= {s.request_id for s in [*self.waiting, *self.running]}
        if aborts:
            for seq in [s for s in self.waiting if s.request_id in aborts]:
                self.waiting.remove(seq)
                self._finish(seq, FinishReason.ABORT)
            for seq in self.running:
                if seq.request_id in aborts and not seq.is_finished:
                    self.cache.release(seq.seq_id)
                    self._finish(seq, FinishReason.ABORT)
        # Finished sequences gave their pages back when they finished (see _sample).
        self.running = [s for s in self.running if not s.is_finished]

    # -- phase 2 ----------------------------------------------------------------------
    def _refill(self) -> None:
        """Admit in arrival order while slots and pages allow; the head waits otherwise."""
        while self.waiting and len(self.running) < self.config.max_seqs:
            seq = self.waiting[0]
            admission = self.cache.admit(
                seq.seq_id, seq.token_ids, reuse_prefix=not seq.records_prompt_logprobs
            )
            if admission is None:
                return
            self.waiting.popleft()
            seq.num_computed = admission.num_cached_tokens
            seq.is_prefilling = True
            if seq.num_preemptions == 0:
                seq.num_cached_tokens = admission.num_shared_tokens
            self.running.append(seq)

    # -- phase 3 ----------------------------------------------------------------------
    def _plan_prefill(self) -> tuple[list[Chunk], list[Sequence]]:
        """Uncomputed prompt tokens of several sequences, under the budget, and whose."""
        budget = self.config.prefill_token_budget
        self.cache.begin_step()
        chunks: list[Chunk] = []
        seqs: list[Sequence] = []
        for seq in self.running:
            if budget == 0:
                break
            if not seq.is_prefilling or seq.is_finished:
                continue
            start = self.cache.shared_ready(seq.seq_id, seq.num_computed)
            if start is None:
                continue  # its prefix is being computed by another sequence: next step
            # Below its shared length only when it adopted pages an aborted owner left
            # uncomputed: those tokens are its own work, not cache hits.
            seq.num_cached_tokens = min(seq.num_cached_tokens, start)
            seq.num_computed = start
            end = min(len(seq.token_ids), start + budget)
            self.cache.plan(seq.seq_id, start, end)
            chunks.append(
                Chunk(
                    seq.seq_id,
                    start,
                    seq.token_ids[start:end],
                    wants_logits=end == len(seq.token_ids),
                    all_logits=seq.records_prompt_logprobs,
                )
            )
            seqs.append(seq)
            budget -= end - start
        return chunks, seqs

    def _prefill(self, chunks: list[Chunk], seqs: list[Sequence], decoding: list[Sequence]) -> bool:
        """The prompt chunks in one forward, with one token of each `decoding` sequence
        riding in it (no drafts: the forward is a prompt's, not a decode step's); whether any
        prompt sampled its first token.

        Why ride: a separate decode step after each prompt chunk cost 18-51 ms at 8-31
        decoding rows on a 2-core Xeon, the rows in a prompt's forward a few ms
        (docs/BENCHMARKS.md), and every waiting prompt waited for it.
        """
        rows = [Chunk(seq.seq_id, seq.num_computed, [seq.token_ids[-1]], True) for seq in decoding]
        logits = self.runner.forward([*chunks, *rows])
        self.counters.prefill_tokens += sum(len(c.token_ids) for c in chunks)
        if any(c.all_logits for c in chunks):
            logits = self.processor.take_prompt_logprobs(seqs, chunks, logits)
        for seq, chunk in zip(seqs, chunks, strict=True):
            seq.num_computed = chunk.end
            self.cache.commit(seq.seq_id, seq.token_ids, seq.num_computed)
        if decoding:
            self.counters.decode_steps += 1
        for seq in decoding:
            seq.num_computed = len(seq.token_ids)
            self.cache.commit(seq.seq_id, seq.token_ids, seq.num_computed)
        sampled = [s for s, c in zip(seqs, chunks, strict=True) if c.wants_logits]
        self._sample([*sampled, *decoding], logits)
        return bool(sampled)

    # -- phase 4 ----------------------------------------------------------------------
    def _ready_to_decode(self) -> list[Sequence]:
        """Every decoding sequence that has room for its next token (see _make_room)."""
        ready: list[Sequence] = []
        for seq in [s for s in self.running if not (s.is_prefilling or s.is_finished)]:
            if seq not in self.running:
                continue  # preempted while making room for an older sequence
            if self._make_room(seq):
                ready.append(seq)
        return ready

    def _decode(self, ready: list[Sequence]) -> None:
        """One token for every ready decoding sequence, in one forward."""
        if not ready:
            return
        start = time.perf_counter()
        drafts = self._drafts(ready)
        chunks = [
            Chunk(seq.seq_id, seq.num_computed + i, [token], True)
            for seq in ready
            for i, token in enumerate([seq.token_ids[-1], *drafts.get(seq, ())])
        ]
        logits = self.runner.forward(chunks)
        self.counters.decode_steps += 1
        for seq in ready:
            seq.num_computed = len(seq.token_ids)
            self.cache.commit(seq.seq_id, seq.token_ids, seq.num_computed)
        if drafts:
            self._verify(ready, drafts, logits)
        else:
            self._sample(ready, logits)
        self._observe_guesses(ready, drafts)
        if self.decode_cost is not None:  # the served step, sampling rounds included
            self.decode_cost.observe(len(chunks), time.perf_counter() - start)

    def _make_room(self, seq: Sequence) -> bool:
        """Pages for the token `seq` feeds next, preempting the newest sequences if needed."""
        while not self.cache.grow(seq.seq_id, len(seq.token_ids)):
            victim = next(s for s in reversed(self.running) if not s.is_finished)
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        """Free everything, requeue first; it recomputes its prompt and output later."""
        self.cache.release(seq.seq_id)
        self.running.remove(seq)
        seq.num_computed = 0
        seq.is_prefilling = True
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)
        self.counters.preemptions += 1

    # -- sampling and events ------------------------------------------------------------
    def _sample(self, seqs: list[Sequence], logits: torch.Tensor) -> None:
        for seq, event in self._sample_events(seqs, logits):
            self._emit(seq, event)

    def _sample_events(
        self, seqs: list[Sequence], logits: torch.Tensor
    ) -> list[tuple[Sequence, TokenEvent]]:
        """One token per sequence from its row of `logits`, appended; the events to emit."""
        if not seqs:
            return []
        self.processor.forbid_early_stops(seqs, logits)
        self.grammar_masks.apply(logits, seqs)
        out = sample_rows(logits, seqs)
        events = []
        for i, seq in enumerate(seqs):
            seq.is_prefilling = False
            event = self.processor.append_token(
                seq, out.token_ids[i], out.logprobs[i], out.top_logprobs[i]
            )
            self.counters.total_tokens += 1
            if event.finish_reason is not None:
                # Pages go back before the last event, so whoever receives it sees them free.
                self.cache.release(seq.seq_id)
                self.counters.finished_tasks += 1
            events.append((seq, event))
        return events

    def _finish(self, seq: Sequence, reason: FinishReason, error: str | None = None) -> None:
        seq.finish_reason = reason
        event = TokenEvent(
            seq.request_id, seq.index, "", (), finish_reason=reason, usage=seq.usage(), error=error
        )
        self._emit(seq, event)

    def _emit(self, seq: Sequence, event: TokenEvent) -> None:
        call_safely("event sink of request", seq.request_id, seq.sink, event)

    def _fail_all(self, exc: BaseException) -> None:
        arrived = self.inbox.take_arrived()
        pending = [s for choices in arrived for s in choices] + list(self.waiting)
        self.waiting.clear()
        for seq in self.running:
            with contextlib.suppress(KeyError):  # finished ones already gave their pages back
                self.cache.release(seq.seq_id)
        live = [s for s in self.running if not s.is_finished] + pending
        self.running = []
        for seq in live:
            self._finish(seq, FinishReason.ERROR, error=str(exc) or type(exc).__name__)
