"""SchedulerInbox: what other threads hand the scheduler loop (requests, aborts, stop)."""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING

from worker.engine.step_plan import Delivery

if TYPE_CHECKING:
    from worker.engine.sequence import Sequence


class SchedulerInbox:
    """The only state the scheduler shares between threads.

    Any thread may call add, abort, abort_all and stop, each of which wakes the loop; only
    the loop's thread calls take, take_arrived and wait. The loop's own state (waiting,
    running) never needs the lock.
    """

    def __init__(self) -> None:
        self._arrived: deque[list[Sequence]] = deque()
        self._aborts: set[str] = set()
        self._abort_everything = False
        self._lock = threading.Lock()
        self._wakeup = threading.Event()
        self.is_stopping = False

    def add(self, choices: list[Sequence]) -> None:
        with self._lock:
            self._arrived.append(choices)
        self._wakeup.set()

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._aborts.add(request_id)
        self._wakeup.set()

    def abort_all(self) -> None:
        with self._lock:
            self._abort_everything = True
        self._wakeup.set()

    def stop(self) -> None:
        self.is_stopping = True
        self._wakeup.set()

    def has_pending(self) -> bool:
        return bool(self._arrived or self._aborts or self._abort_everything)

    @property
    def num_arrived(self) -> int:
        """Choices handed in and not yet taken."""
        return sum(len(choices) for choices in list(self._arrived))

    def clear_wakeup(self) -> None:
        self._wakeup.clear()

    def wait(self, timeout: float) -> None:
        """Until something is handed in (since clear_wakeup), or `timeout` seconds."""
        self._wakeup.wait(timeout)

    def take(self) -> Delivery:
        with self._lock:
            arrived, self._arrived = list(self._arrived), deque()
            aborts, self._aborts = self._aborts, set()
            everything, self._abort_everything = self._abort_everything, False
        return Delivery(arrived, aborts, everything)

    def take_arrived(self) -> list[list[Sequence]]:
        """The requests handed in, leaving aborts for the next take."""
        with self._lock:
            arrived, self._arrived = list(self._arrived), deque()
        return arrived
