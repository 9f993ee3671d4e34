"""AdmissionControl: exact in-flight/queued counts, FIFO hand-over, refusals with Retry-After."""

import asyncio

import pytest

from gateway.admission import AdmissionControl
from gateway.errors import ErrorKind, GatewayError


async def test_runs_up_to_the_limit_then_queues_then_refuses():
    gate = AdmissionControl(max_in_flight=2, max_queued=1, queue_timeout_s=5)
    await gate.acquire()
    await gate.acquire()
    waiting = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    assert (gate.in_flight, gate.queued) == (2, 1)
    with pytest.raises(GatewayError) as refused:
        await gate.acquire()
    assert refused.value.kind is ErrorKind.RATE_LIMITED
    assert refused.value.retry_after_s is not None and refused.value.retry_after_s >= 1
    gate.release()  # the queued request takes the freed place
    await waiting
    assert (gate.in_flight, gate.queued, gate.rejected) == (2, 0, 1)


async def test_waiters_are_served_in_arrival_order():
    gate = AdmissionControl(max_in_flight=1, max_queued=3, queue_timeout_s=5)
    await gate.acquire()
    order: list[int] = []

    async def wait(i: int) -> None:
        await gate.acquire()
        order.append(i)

    tasks = [asyncio.create_task(wait(i)) for i in range(3)]
    await asyncio.sleep(0)
    for _ in range(3):
        gate.release()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]


async def test_a_queued_request_that_waits_too_long_is_refused():
    gate = AdmissionControl(max_in_flight=1, max_queued=1, queue_timeout_s=0.05)
    await gate.acquire()
    with pytest.raises(GatewayError, match="queued longer than"):
        await gate.acquire()
    assert (gate.in_flight, gate.queued) == (1, 0)


async def test_a_cancelled_waiter_leaves_no_trace():
    gate = AdmissionControl(max_in_flight=1, max_queued=2, queue_timeout_s=5)
    await gate.acquire()
    waiter = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.queued == 0
    gate.release()
    assert gate.in_flight == 0


async def test_slot_releases_on_exceptions():
    gate = AdmissionControl(max_in_flight=1, max_queued=0, queue_timeout_s=1)
    with pytest.raises(RuntimeError):
        async with gate.slot():
            raise RuntimeError("boom")
    assert gate.in_flight == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_in_flight": 0, "max_queued": 1, "queue_timeout_s": 1}, "max_in_flight"),
        ({"max_in_flight": 1, "max_queued": -1, "queue_timeout_s": 1}, "max_queued"),
        ({"max_in_flight": 1, "max_queued": 1, "queue_timeout_s": 0}, "queue_timeout_s"),
    ],
)
def test_settings_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AdmissionControl(**kwargs)
