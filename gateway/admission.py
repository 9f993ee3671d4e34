"""AdmissionControl: at most N requests in flight, M more queued for a while, the rest refused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from gateway.errors import ErrorKind, GatewayError


class AdmissionControl:
    """A gate every API request passes before any work is done for it.

    Up to `max_in_flight` requests run at once; up to `max_queued` more wait at most
    `queue_timeout_s` for a turn, in arrival order. Anything beyond is refused at once with
    a rate-limit error carrying Retry-After; so is a request that waited too long.
    """

    def __init__(self, max_in_flight: int, max_queued: int, queue_timeout_s: float) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if max_queued < 0:
            raise ValueError(f"max_queued must be >= 0, got {max_queued}")
        if queue_timeout_s <= 0:
            raise ValueError(f"queue_timeout_s must be > 0, got {queue_timeout_s}")
        self.max_in_flight = max_in_flight
        self.max_queued = max_queued
        self.queue_timeout_s = queue_timeout_s
        self.in_flight = 0
        self.rejected = 0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def _refuse(self, why: str) -> GatewayError:
        self.rejected += 1
        return GatewayError(
            ErrorKind.RATE_LIMITED,
            f"the server is at capacity ({why}); retry shortly",
            retry_after_s=max(1.0, self.queue_timeout_s / 4),
        )

    async def acquire(self) -> None:
        if self.in_flight < self.max_in_flight and not self._waiters:
            self.in_flight += 1
            return
        if len(self._waiters) >= self.max_queued:
            raise self._refuse(f"{self.in_flight} running, {len(self._waiters)} queued")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.queue_timeout_s)
        except TimeoutError:
            if waiter.done():  # the turn came just as the wait ran out: keep it
                return
            self._waiters.remove(waiter)
            raise self._refuse(f"queued longer than {self.queue_timeout_s:g} s") from None
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.done():
                self.release()  # handed a turn while being cancelled: pass it on
            raise

    def release(self) -> None:
        """A request finished: hand its place to the oldest waiter, if any."""
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)  # in_flight stays: the place changes hands
                return
        self.in_flight -= 1

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()
