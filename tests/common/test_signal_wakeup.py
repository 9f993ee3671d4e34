"""SignalWakeup: a nap ends when a signal with a Python handler arrives, not at its end."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from common.signal_wakeup import SignalWakeup

NAP_S = 30.0


@pytest.fixture
def handled_usr1() -> Iterator[list[int]]:
    """SIGUSR1 handled in Python (recorded), the previous handler back after."""
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda sig, _frame: received.append(sig))
    try:
        yield received
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_signal_ends_the_nap(handled_usr1: list[int]) -> None:
    wakeup = SignalWakeup()
    try:
        timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.start()
        started = time.monotonic()
        wakeup.nap(NAP_S)
        napped = time.monotonic() - started
        timer.join()
    finally:
        wakeup.close()
    assert handled_usr1 == [signal.SIGUSR1]
    assert napped < NAP_S / 3, f"napped {napped:.1f} s of {NAP_S}: the signal did not wake it"


def test_after_a_wakeup_is_cleared_the_next_nap_sleeps(handled_usr1: list[int]) -> None:
    wakeup = SignalWakeup()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        wakeup.nap(NAP_S)  # ends at once: the byte was already there
        started = time.monotonic()
        wakeup.nap(0.3)
        napped = time.monotonic() - started
    finally:
        wakeup.close()
    assert napped >= 0.25, "a cleared wakeup still woke the next nap"


def test_close_gives_the_previous_wakeup_fd_back() -> None:
    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    wakeup = SignalWakeup()
    wakeup.close()
    assert signal.set_wakeup_fd(before) == before
