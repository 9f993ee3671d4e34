"""SchedulerLoop: the thread a scheduler steps on, and what other threads may call into it."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

from worker.engine.scheduler_inbox import SchedulerInbox

if TYPE_CHECKING:
    from worker.engine.sequence import Sequence

log = logging.getLogger(__name__)


class SchedulerLoop(ABC):
    """Steps whenever there is work, on one thread, until stopped.

    Other threads only add, abort and stop, through the inbox. A step that raises fails every
    live sequence and the loop goes on; a flush listener that raises is logged and skipped.
    """

    def __init__(self, idle_wait_s: float) -> None:
        self.inbox = SchedulerInbox()
        self._idle_wait_s = idle_wait_s
        self._thread: threading.Thread | None = None
        # Called on the loop's thread at each step's end: the events emitted so far should
        # leave (the worker sends them then).
        self.flush_listeners: list[Callable[[], None]] = []

    @abstractmethod
    def has_work(self) -> bool:
        """Anything handed in, waiting or running."""

    @abstractmethod
    def step(self) -> None:
        """One iteration, on the loop's thread."""

    @abstractmethod
    def _fail_all(self, exc: BaseException) -> None:
        """End every live sequence with an error."""

    # -- thread-safe entry points -----------------------------------------------------
    def add(self, choices: list[Sequence]) -> None:
        """Queue every choice of one request; they are admitted from the next step on."""
        self.inbox.add(choices)

    def abort(self, request_id: str) -> None:
        self.inbox.abort(request_id)

    def abort_all(self) -> None:
        """Abort every request added so far (e.g. their gateway went away)."""
        self.inbox.abort_all()

    def start(self) -> None:
        """Run the loop on a new thread (an engine may instead call run() on its own)."""
        if self._thread is not None:
            raise RuntimeError("the scheduler is already running")
        thread = threading.Thread(target=self.run, name="inference-scheduler", daemon=True)
        self._thread = thread
        thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        self.inbox.stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    # -- the loop ---------------------------------------------------------------------
    def run(self) -> None:
        """Step whenever there is work until stop(); on the calling thread."""
        self._thread = threading.current_thread()
        while not self.inbox.is_stopping:
            self.inbox.clear_wakeup()
            if not self.has_work():
                self.inbox.wait(self._idle_wait_s)
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


def call_safely(what: str, which: object, function: Callable[..., object], *args: object) -> None:
    """A consumer's failure is its own, never the loop's (its message is only built then)."""
    try:
        function(*args)
    except Exception:
        log.exception("%s %s failed", what, which)
