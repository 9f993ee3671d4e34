"""SignalWakeup: a socket that turns readable when a signal arrives, for loops that sleep.

Why: a Python signal handler runs only once the sleep or poll it interrupted has given up, and
Python resumes an interrupted sleep (PEP 475), so a loop napping between checks noticed a
SIGTERM up to a nap later (0.2-0.5 s of every stop). With the C handler writing a byte to this
socket (signal.set_wakeup_fd), a loop that also waits on it wakes at once.
"""

from __future__ import annotations

import select
import signal
import socket


class SignalWakeup:
    """Installed on the main thread (where signals are handled) until close()."""

    def __init__(self) -> None:
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)
        self._previous = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)

    def fileno(self) -> int:
        """The end to wait on (select, zmq.Poller)."""
        return self._read.fileno()

    def nap(self, seconds: float) -> None:
        """Sleep up to `seconds`, less if a signal arrives meanwhile."""
        select.select([self._read], [], [], seconds)
        self.clear()

    def clear(self) -> None:
        """Read away what signals wrote, so that the next wait waits."""
        try:
            while self._read.recv(512):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous)
        self._read.close()
        self._write.close()
