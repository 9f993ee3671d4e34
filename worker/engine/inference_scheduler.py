"""InferenceScheduler: one step is schedule → execute → update, on the loop's thread."""

from __future__ import annotations

import time

import torch

from worker.engine.drafting import Drafter
from worker.engine.output_processor import OutputProcessor
from worker.engine.runner import ModelRunner
from worker.engine.scheduler import Events, Scheduler
from worker.engine.scheduler_config import SchedulerConfig, SchedulerCounters
from worker.engine.scheduler_loop import SchedulerLoop, call_safely
from worker.engine.sequence import Sequence
from worker.engine.step_executor import StepExecutor
from worker.engine.step_plan import StepPlan
from worker.engine.token_sampler import TokenSampler
from worker.kv.base import KVCache


class InferenceScheduler(SchedulerLoop):
    """The Scheduler plans and records, the StepExecutor runs the model and samples; the
    thread and the calls other threads make into it come from SchedulerLoop."""

    def __init__(
        self,
        runner: ModelRunner,
        cache: KVCache,
        processor: OutputProcessor,
        config: SchedulerConfig | None = None,
    ) -> None:
        self.config = config or SchedulerConfig()
        super().__init__(self.config.idle_wait_s)
        self.sampler = TokenSampler(processor.tokenizer)
        self.scheduler = Scheduler(cache, processor, self.sampler, self.config)
        self.executor = StepExecutor(runner, self.sampler)
        self._in_flight: StepPlan | None = None  # scheduled, its events not emitted yet

    @torch.inference_mode()
    def step(self) -> None:
        """One iteration; no I/O inside, events go to each sequence's sink."""
        plan = self._in_flight = self.scheduler.schedule(self.inbox.take())
        start = time.perf_counter()
        output = self.executor.execute(plan)
        events = self.scheduler.update(plan, output)
        cost = self.scheduler.drafter.cost
        if cost is not None and plan.is_decode_only:  # the served step, sampling included
            cost.observe(len(plan.chunks), time.perf_counter() - start)
        self._in_flight = None
        self._emit(events)

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
        return bool(self.inbox.has_pending() or self.scheduler.has_work)

    @property
    def num_running(self) -> int:
        return sum(1 for s in list(self.scheduler.running) if not s.is_finished)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting) + self.inbox.num_arrived

    def _emit(self, events: Events) -> None:
        for seq, event in events:
            call_safely("event sink of request", seq.request_id, seq.sink, event)

    def _fail_all(self, exc: BaseException) -> None:
        plan, self._in_flight = self._in_flight, None
        if plan is not None:  # ended by an abort in a step that then failed: say so still
            self._emit([(seq, self.scheduler.finish_event(seq)) for seq in plan.aborted])
        self._emit(self.scheduler.fail_all(self.inbox.take_arrived(), exc))
