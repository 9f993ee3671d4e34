"""InferenceScheduler: the continuous-batching step, cleanup → refill → prefill → decode."""

from __future__ import annotations

import contextlib
from collections import Counter, deque

import torch

from common.token_output import FinishReason
from worker.engine.output_processor import OutputProcessor
from worker.engine.runner import Chunk, ModelRunner
from worker.engine.scheduler_config import SchedulerConfig, SchedulerCounters
from worker.engine.scheduler_loop import SchedulerLoop, call_safely
from worker.engine.sequence import Sequence, TokenEvent
from worker.engine.speculation import DecodeCost, DraftState
from worker.kv.base import KVCache
from worker.sampling.grammar import GrammarMasks
from worker.sampling.sampler import sample_rows

# Invariants, held between steps:
# - Every sequence is in exactly one place: the inbox, `waiting` (holds no pages) or
#   `running` (holds the pages of its token_ids[:num_computed] and of what it will compute).
# - A running sequence either prefills (feeds up to the token budget of its uncomputed
#   tokens per step) or decodes (feeds exactly its last sampled token); see Sequence.
# - A sequence gives its pages back the moment it finishes, before its last event is
#   emitted; an abort takes effect at the next cleanup, within one iteration.


class InferenceScheduler(SchedulerLoop):
    """The step and the state it owns; the thread it runs on and the calls other threads make
    into it come from SchedulerLoop."""

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
        # Set once the engine has measured its decode step; None: no drafts.
        self.decode_cost: DecodeCost | None = None

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
        self._prefill()
        self._decode()

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
            admission = self.cache.admit(seq.seq_id, seq.token_ids)
            if admission is None:
                return
            self.waiting.popleft()
            seq.num_computed = admission.num_cached_tokens
            seq.is_prefilling = True
            if seq.num_preemptions == 0:
                seq.num_cached_tokens = admission.num_shared_tokens
            self.running.append(seq)

    # -- phase 3 ----------------------------------------------------------------------
    def _prefill(self) -> None:
        """Uncomputed prompt tokens of several sequences in one forward, under the budget."""
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
                Chunk(seq.seq_id, start, seq.token_ids[start:end], end == len(seq.token_ids))
            )
            seqs.append(seq)
            budget -= end - start
        if not chunks:
            return
        logits = self.runner.forward(chunks)
        self.counters.prefill_tokens += sum(len(c.token_ids) for c in chunks)
        for seq, chunk in zip(seqs, chunks, strict=True):
            seq.num_computed = chunk.end
            self.cache.commit(seq.seq_id, seq.token_ids, seq.num_computed)
        self._sample([s for s, c in zip(seqs, chunks, strict=True) if c.wants_logits], logits)

    # -- phase 4 ----------------------------------------------------------------------
    def _decode(self) -> None:
        """One token for every decoding sequence, in one forward."""
        ready: list[Sequence] = []
        for seq in [s for s in self.running if not (s.is_prefilling or s.is_finished)]:
            if seq not in self.running:
                continue  # preempted while making room for an older sequence
            if self._make_room(seq):
                ready.append(seq)
        if not ready:
            return
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

    # -- speculative decoding (worker.engine.speculation) ------------------------------------
    def _drafts(self, seqs: list[Sequence]) -> dict[Sequence, list[int]]:
        """Each sequence's drafted tokens: of all the guesses, the most likely ones, as many
        as make the most tokens per second by the measured step cost.

        A sequence with a guess not worth a row this step keeps its first token in `guess`,
        checked against the token it samples, so its acceptance estimate stays current.
        """
        cost, limit = self.decode_cost, self.config.speculative_tokens
        if cost is None or limit == 0:
            return {}
        proposals: dict[Sequence, list[int]] = {}
        chances: list[tuple[float, Sequence]] = []
        for seq in seqs:
            state = seq.speculation = seq.speculation or DraftState()
            state.guess = None
            room = min(limit, seq.max_total_tokens - len(seq.token_ids) - 1)
            proposal = state.drafter.propose(seq.token_ids, room)
            if proposal:
                proposals[seq] = proposal
                chances.extend((state.acceptance**j, seq) for j in range(1, len(proposal) + 1))
        chances.sort(key=lambda chance: chance[0], reverse=True)
        taken = chances[: cost.best_draft_rows(len(seqs), [c for c, _ in chances])]
        counts = Counter(seq for _, seq in taken)
        drafts: dict[Sequence, list[int]] = {}
        for seq, proposal in proposals.items():
            count = counts[seq]
            # Rows for the drafts only where pages are free: never preempt for a guess.
            if count and self.cache.grow(seq.seq_id, len(seq.token_ids) + count):
                drafts[seq] = proposal[:count]
            else:
                assert seq.speculation is not None
                seq.speculation.guess = proposal[0]
        return drafts

    def _verify(
        self, seqs: list[Sequence], drafts: dict[Sequence, list[int]], logits: torch.Tensor
    ) -> None:
        """Sample row after row; a sequence goes on while its sampled token is its draft's.

        Row i of a sequence holds the logits after its i-th drafted token, valid while every
        draft before it was kept; each kept draft's k/v, written in this forward, is then
        computed context.
        """
        first_row: dict[Sequence, int] = {}
        fed_from = {seq: seq.num_computed for seq in drafts}
        rows = 0
        for seq in seqs:
            first_row[seq] = rows
            rows += 1 + len(drafts.get(seq, ()))
        alive, i = seqs, 0
        while alive:
            index = torch.tensor([first_row[seq] + i for seq in alive], device=logits.device)
            self._sample(alive, logits.index_select(0, index))
            going = []
            for seq in alive:
                draft = drafts.get(seq, [])
                if not seq.is_finished and i < len(draft) and seq.token_ids[-1] == draft[i]:
                    seq.num_computed += 1
                    going.append(seq)
            alive, i = going, i + 1
        for seq, draft in drafts.items():
            kept = seq.num_computed - fed_from[seq]
            assert seq.speculation is not None
            seq.speculation.observe(len(draft), kept)
            self.counters.draft_tokens += len(draft)
            self.counters.accepted_draft_tokens += kept
            if not seq.is_finished:
                self.cache.commit(seq.seq_id, seq.token_ids, seq.num_computed)

    @staticmethod
    def _observe_guesses(seqs: list[Sequence], drafts: dict[Sequence, list[int]]) -> None:
        for seq in seqs:
            state = seq.speculation
            if state is not None and state.guess is not None and seq not in drafts:
                state.observe(1, int(seq.token_ids[-1] == state.guess))

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
        if not seqs:
            return
        self.processor.forbid_early_stops(seqs, logits)
        self.grammar_masks.apply(logits, seqs)
        out = sample_rows(logits, seqs)
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
            self._emit(seq, event)

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
