"""InferenceScheduler: the continuous-batching loop, cleanup → refill → prefill → decode."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable

import torch

from worker.engine.output_processor import OutputProcessor
from worker.engine.runner import Chunk, ModelRunner
from worker.engine.scheduler_config import SchedulerConfig, SchedulerCounters
from worker.engine.sequence import FinishReason, Sequence, TokenEvent
from worker.kv.base import KVCache
from worker.sampling.grammar import GrammarMasks
from worker.sampling.sampler import sample_rows

log = logging.getLogger(__name__)

# Invariants, held between steps:
# - Every sequence is in exactly one place: the inbox, `waiting` (holds no pages) or
#   `running` (holds the pages of its token_ids[:num_computed] and of what it will compute).
# - A running sequence either prefills (feeds up to the token budget of its uncomputed
#   tokens per step) or decodes (feeds exactly its last sampled token); see Sequence.
# - A sequence gives its pages back the moment it finishes, before its last event is
#   emitted; an abort takes effect at the next cleanup, within one iteration.


class InferenceScheduler:
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
        self.counters = SchedulerCounters()
        tokenizer = processor.tokenizer
        self.grammar_masks = GrammarMasks(
            lambda ids: tokenizer.decode(ids, skip_special_tokens=False), tokenizer.eos_token_ids
        )
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._inbox: deque[list[Sequence]] = deque()
        self._aborts: set[str] = set()
        self._abort_everything = False
        self._lock = threading.Lock()
        self._wakeup = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        # Called on the loop's thread after each step (the worker sends its events then).
        self.step_end_listeners: list[Callable[[], None]] = []

    # -- thread-safe entry points -----------------------------------------------------
    def add(self, choices: list[Sequence]) -> None:
        """Queue every choice of one request; they are admitted from the next step on."""
        with self._lock:
            self._inbox.append(choices)
        self._wakeup.set()

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._aborts.add(request_id)
        self._wakeup.set()

    def abort_all(self) -> None:
        """Abort every request added so far (e.g. their gateway went away)."""
        with self._lock:
            self._abort_everything = True
        self._wakeup.set()

    def has_work(self) -> bool:
        return bool(
            self._inbox or self._aborts or self._abort_everything or self.waiting or self.running
        )

    @property
    def num_running(self) -> int:
        return sum(1 for s in list(self.running) if not s.is_finished)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + sum(len(choices) for choices in list(self._inbox))

    def start(self) -> None:
        """Run the loop on a new thread (an engine may instead call run() on its own)."""
        if self._thread is not None:
            raise RuntimeError("the scheduler is already running")
        thread = threading.Thread(target=self.run, name="inference-scheduler", daemon=True)
        self._thread = thread
        thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stopping = True
        self._wakeup.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    # -- the loop ---------------------------------------------------------------------
    def run(self) -> None:
        """Step whenever there is work until stop(); on the calling thread."""
        self._thread = threading.current_thread()
        while not self._stopping:
            self._wakeup.clear()
            if not self.has_work():
                self._wakeup.wait(self.config.idle_wait_s)
                continue
            try:
                self.step()
            except Exception as exc:  # a failed forward must not kill the worker
                log.exception("scheduler step failed; failing every live sequence")
                self._fail_all(exc)
            self._notify_step_end()
        self._fail_all(RuntimeError("the engine shut down"))
        self._notify_step_end()

    def _notify_step_end(self) -> None:
        for listener in list(self.step_end_listeners):
            _call_safely("step-end listener", listener, listener)

    @torch.inference_mode()
    def step(self) -> None:
        """One iteration; no I/O inside, events go to each sequence's sink."""
        self._cleanup()
        self._refill()
        self._prefill()
        self._decode()

    # -- phase 1 ----------------------------------------------------------------------
    def _cleanup(self) -> None:
        with self._lock:
            arrived, self._inbox = list(self._inbox), deque()
            aborts, self._aborts = self._aborts, set()
            everything, self._abort_everything = self._abort_everything, False
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
        chunks = [
            Chunk(s.seq_id, s.num_computed, s.token_ids[s.num_computed :], True) for s in ready
        ]
        logits = self.runner.forward(chunks)
        self.counters.decode_steps += 1
        for seq in ready:
            seq.num_computed = len(seq.token_ids)
            self.cache.commit(seq.seq_id, seq.token_ids, seq.num_computed)
        self._sample(ready, logits)

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
        _call_safely("event sink of request", seq.request_id, seq.sink, event)

    def _fail_all(self, exc: BaseException) -> None:
        with self._lock:
            arrived, self._inbox = list(self._inbox), deque()
        pending = [s for choices in arrived for s in choices] + list(self.waiting)
        self.waiting.clear()
        for seq in self.running:
            with contextlib.suppress(KeyError):  # finished ones already gave their pages back
                self.cache.release(seq.seq_id)
        live = [s for s in self.running if not s.is_finished] + pending
        self.running = []
        for seq in live:
            self._finish(seq, FinishReason.ERROR, error=str(exc) or type(exc).__name__)


def _call_safely(what: str, which: object, function: Callable[..., object], *args: object) -> None:
    """A consumer's failure is its own, never the loop's (its message is only built then)."""
    try:
        function(*args)
    except Exception:
        log.exception("%s %s failed", what, which)
