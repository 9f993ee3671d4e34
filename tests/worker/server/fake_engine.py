"""An engine without a model for in-process WorkerServer tests: what the server calls, with
every call recorded; a test plays the scheduler by sending events to a request's sink."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.sampling_params import SamplingParams
from common.worker_stats import WorkerStats
from worker.engine.options import EngineOptions
from worker.engine.sequence import EventSink, TokenEvent
from worker.errors import ContextLengthExceeded

MAX_CONTEXT = 64


@dataclass
class FakeScheduler:
    flush_listeners: list[Any] = field(default_factory=list)


class FakeEngine:
    """A prompt "tokenizes" to one id per character; nothing runs until a test `emit`s.

    Lists are appended on the server's I/O thread and read on the test's (appends are atomic).
    """

    def __init__(self) -> None:
        self.model_name = "fake"
        self.model_aliases = ("fake-*",)
        self.kernels = "CPU fake: no kernels"
        self.max_model_len = MAX_CONTEXT
        self.options = EngineOptions(max_seqs=4)
        self.scheduler = FakeScheduler()
        self.sinks: dict[str, EventSink] = {}
        self.submitted: list[tuple[str, Any, SamplingParams]] = []
        self.aborted: list[str] = []
        self.num_abort_all = 0
        self.idle = True
        self.finished_tasks = 0  # what stats() says: a test sets it when it ends a choice

    def submit(
        self, prompt: Any, params: SamplingParams, sink: EventSink, request_id: str, chat: bool
    ) -> tuple[str, int]:
        if len(prompt) > MAX_CONTEXT:
            raise ContextLengthExceeded("prompt is too long", "messages" if chat else "prompt")
        self.submitted.append((request_id, prompt, params))
        self.sinks[request_id] = sink
        return request_id, len(prompt)

    def emit(self, event: TokenEvent) -> None:
        """What the scheduler would send for `event` (from this, a non-scheduler thread: at
        once, not at a step's end)."""
        self.sinks[event.request_id](event)

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def abort_all(self) -> None:
        self.num_abort_all += 1

    def is_idle(self) -> bool:
        return self.idle

    def stats(self) -> WorkerStats:
        return WorkerStats(
            total_tasks=len(self.submitted),
            active_tasks=1,
            waiting_queue=2,
            kv_pages_total=100,
            kv_pages_free=90,
            kv_pages_cached=5,
            kv_page_size=16,
            prefix_cache_hit_tokens=7,
            finished_tasks=self.finished_tasks,
        )
