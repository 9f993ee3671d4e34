"""EngineCore: the engine thread's loop (schedule → execute → update) and its thread-safe inbox."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

import torch

from worker.engine.drafting import Drafter
from worker.engine.output_processor import OutputProcessor
from worker.engine.runner import ModelRunner
from worker.engine.scheduler import Scheduler
from worker.engine.scheduler_config import SchedulerConfig, SchedulerCounters
from worker.engine.sequence import Events, Sequence
from worker.engine.step_executor import StepExecutor, TokenSampler
from worker.engine.step_plan import Delivery, StepPlan
from worker.kv.base import KVCache

log = logging.getLogger(__name__)


class EngineCore:
    """Steps whenever there is work, on one thread, until stopped: the Scheduler plans and
    records, the StepExecutor runs the model and samples.

    Other threads only add, abort, abort_all and stop: each takes the lock or sets a flag,
    then wakes the loop. Only the loop's thread touches the scheduler's state (waiting,
    running), which so never needs the lock. A step that raises fails every live sequence
    and the loop goes on; an event sink or flush listener that raises is logged and skipped.
    """

    def __init__(
        self,
        runner: ModelRunner,
        cache: KVCache,
        processor: OutputProcessor,
        config: SchedulerConfig | None = None,
    ) -> None:
        self.config = config or SchedulerConfig()
        self.sampler = TokenSampler(processor.tokenizer)
        self.scheduler = Scheduler(cache, processor, self.config)
        self.executor = StepExecutor(runner, self.sampler)
        self._in_flight: StepPlan | None = None  # scheduled, its events not emitted yet
        # Handed in by other threads, under the lock, until the loop takes them.
        self._arrived: deque[list[Sequence]] = deque()
        self._aborts: set[str] = set()
        self._abort_everything = False
        self._lock = threading.Lock()
        self._wakeup = threading.Event()
        self._is_stopping = False
        self._thread: threading.Thread | None = None
        # Called on the loop's thread at each step's end: the events emitted so far should
        # leave (the worker sends them then).
        self.flush_listeners: list[Callable[[], None]] = []

    # -- the step -----------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> None:
        """One iteration; no I/O inside, events go to each sequence's sink. A drafted decode
        goes on in rounds (DraftRounds): the row after a kept draft samples with what
        appending it changed, so the executor's samples and the scheduler's updates alternate."""
        plan = self._in_flight = self.scheduler.schedule(self._take())
        start = time.perf_counter()
        output = self.executor.execute(plan)
        events = self.scheduler.update(plan, output)
        while (rows := self.scheduler.draft_rows) is not None:
            events += self.scheduler.update_drafts(self.executor.sample_drafted(rows, output))
        seconds, cost = time.perf_counter() - start, self.scheduler.drafter.cost
        if cost is not None and plan.is_decode_only:  # the served step, sampling included
            cost.observe(len(plan.chunks), seconds)
        if plan.prompt_chunks:
            self.scheduler.pace.observe(plan.num_rows, seconds)
        self._in_flight = None
        self._emit(events)

    def _emit(self, events: Events) -> None:
        for seq, event in events:
            call_safely("event sink of request", seq.request_id, seq.sink, event)

    def _fail_all(self, exc: BaseException) -> None:
        """End every live sequence with an error."""
        plan, self._in_flight = self._in_flight, None
        if plan is not None:  # ended by an abort in a step that then failed: say so still
            self._emit([(seq, seq.end_event()) for seq in plan.aborted])
        with self._lock:  # the requests handed in, leaving aborts for the next take
            arrived, self._arrived = list(self._arrived), deque()
        self._emit(self.scheduler.fail_all(arrived, exc))

    # -- what the engine and the loop read ------------------------------------------------
    @property
    def runner(self) -> ModelRunner:
        return self.executor.runner

    @property
    def drafter(self) -> Drafter:
        return self.scheduler.drafter

    @property
    def counters(self) -> SchedulerCounters:
        return self.scheduler.counters

    @property
    def waiting(self) -> list[Sequence]:
        return list(self.scheduler.waiting)

    @property
    def running(self) -> list[Sequence]:
        return list(self.scheduler.running)

    def has_work(self) -> bool:
        """Anything handed in, waiting or running."""
        has_pending = self._arrived or self._aborts or self._abort_everything
        return bool(has_pending or self.scheduler.has_work)

    @property
    def num_running(self) -> int:
        return sum(1 for s in list(self.scheduler.running) if not s.is_finished)

    @property
    def num_waiting(self) -> int:
        """Choices waiting, and those handed in and not yet taken."""
        num_arrived = sum(len(choices) for choices in list(self._arrived))
        return len(self.scheduler.waiting) + num_arrived

    # -- thread-safe entry points -----------------------------------------------------
    def add(self, choices: list[Sequence]) -> None:
        """Queue every choice of one request; they are admitted from the next step on."""
        with self._lock:
            self._arrived.append(choices)
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

    def start(self) -> None:
        """Run the loop on a new thread (an engine may instead call run() on its own)."""
        if self._thread is not None:
            raise RuntimeError("the scheduler is already running")
        thread = threading.Thread(target=self.run, name="inference-scheduler", daemon=True)
        self._thread = thread
        thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        self._is_stopping = True
        self._wakeup.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    # -- the loop ---------------------------------------------------------------------
    def run(self) -> None:
        """Step whenever there is work until stop(); on the calling thread."""
        self._thread = threading.current_thread()
        while not self._is_stopping:
            self._wakeup.clear()
            if not self.has_work():
                self._wakeup.wait(self.config.idle_wait_s)  # until something is handed in
                continue
            try:
                self.step()
            except Exception as exc:  # a failed forward must not kill the worker
                log.exception("scheduler step failed; failing every live sequence")
                self._fail_all(exc)
            self.flush()
        self._fail_all(RuntimeError("the engine shut down"))
        self.flush()

    def flush(self) -> None:
        """Hand the events emitted so far on: what the loop does after every step."""
        for listener in list(self.flush_listeners):
            call_safely("flush listener", listener, listener)

    def _take(self) -> Delivery:
        """Everything handed in since the last take."""
        with self._lock:
            arrived, self._arrived = list(self._arrived), deque()
            aborts, self._aborts = self._aborts, set()
            everything, self._abort_everything = self._abort_everything, False
        return Delivery(arrived, aborts, everything)


def call_safely(what: str, which: object, function: Callable[..., object], *args: object) -> None:
    """A consumer's failure is its own, never the loop's (its message is only built then)."""
    try:
        function(*args)
    except Exception:
        log.exception("%s %s failed", what, which)
