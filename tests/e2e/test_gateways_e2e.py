"""Two gateways share two workers, on loopback: both serve, a SIGKILLed gateway costs only its
own requests (the workers free their pages within the timeout), and a new gateway on the same
address is joined by the running workers."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from bench.server import Server, WorkerProcess, wait_until
from tests.e2e.fleet import (
    GATEWAY_TIMEOUT_S,
    HEARTBEAT_S,
    Streams,
    num_queued,
    only_its_own_run,
    pages_free,
    worker_figures,
)

pytestmark = pytest.mark.slow
WORKER_IDS = ["w0", "w1"]


@dataclass
class Fleet:
    gateways: list[Server]
    workers: list[WorkerProcess]


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    """Two gateways on their own loopback ports; two workers on the default model dialing
    both (`--gateway` twice)."""
    gateways = [Server("gateway"), Server("gateway")]
    first, second = (gateway.worker_bind for gateway in gateways)
    workers = [
        WorkerProcess(first, "--gateway", second, "--kv-cache-mb", "256", worker_id=worker_id)
        for worker_id in WORKER_IDS
    ]
    running = Fleet(gateways, workers)
    try:
        for gateway in gateways:
            gateway.wait_ready(workers=2)
        yield running
    finally:
        for server in [*running.gateways, *running.workers]:
            server.stop()


def test_each_gateway_sees_both_workers_and_streams_through_both(fleet: Fleet):
    first, second = fleet.gateways
    stats = [gateway.stats() for gateway in fleet.gateways]
    # One pool: the same two processes under each gateway, each gateway itself.
    assert [sorted(worker_figures(s, "pid").items()) for s in stats] == [
        sorted(worker_figures(stats[0], "pid").items())
    ] * 2
    assert sorted(worker_figures(stats[0], "pid")) == WORKER_IDS
    assert stats[0]["gateway"]["incarnation"] != stats[1]["gateway"]["incarnation"]
    assert [s["gateway"]["worker_bind"] for s in stats] == [first.worker_bind, second.worker_bind]
    for gateway in fleet.gateways:
        metrics = urllib.request.urlopen(f"{gateway.url}/metrics", timeout=5).read().decode()
        assert "astrai_workers 2.0" in metrics.splitlines()
        assert all(f'worker_id="{w}"' in metrics for w in WORKER_IDS)
    assert wait_until(
        lambda: all(
            worker_figures(g.stats(), "gateways") == {"w0": 2, "w1": 2} for g in fleet.gateways
        ),
        5,
    )

    def finished(gateway: Server) -> int:
        return sum(worker_figures(gateway.stats(), "finished_tasks").values())

    before = [finished(gateway) for gateway in fleet.gateways]
    streams = [Streams(gateway.url, 6, 12).start() for gateway in fleet.gateways]
    assert all(s.join().all_whole() for s in streams)
    # Both gateways' requests ran on the one pool: each gateway sees all 12 end.
    assert wait_until(
        lambda: [finished(g) - b for g, b in zip(fleet.gateways, before, strict=True)] == [12, 12],
        10 * HEARTBEAT_S,
    )
    # A gateway's /stats shows its finished requests at once: the worker's figures after a
    # request's end come with the end itself, before the client has it.
    done_before = finished(first)
    assert Streams(first.url, 3, 8).start().join().all_whole()
    after = first.stats()
    assert sum(worker_figures(after, "finished_tasks").values()) - done_before == 3
    assert pages_free(after)


def test_a_killed_gateway_costs_only_its_requests_and_a_new_one_is_joined(fleet: Fleet):
    doomed, survivor = fleet.gateways
    pids = worker_figures(survivor.stats(), "pid")

    def finished(gateway: Server) -> dict[str, int]:
        return worker_figures(gateway.stats(), "finished_tasks")

    # Nothing runs: once both gateways have the same figures, they are the workers' own.
    assert wait_until(lambda: finished(survivor) == finished(doomed), 10 * HEARTBEAT_S)
    finished_before = sum(finished(survivor).values())
    # Long enough to outlast the workers' timeout on a fast CPU (a stream that ends before the
    # workers learn of the kill is finished, not aborted): 3 a worker fit its 256 MiB cache.
    long_ones = Streams(doomed.url, 6, 1500).start()
    assert wait_until(lambda: doomed.stats().get("open_requests") == 6, 30)
    assert wait_until(lambda: num_queued(survivor.stats()) >= 6, 30)  # the survivor sees them
    short_ones = Streams(survivor.url, 6, 24).start()
    os.killpg(doomed.process.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    doomed.stop()

    # Within the workers' timeout and a second, nothing of the dead gateway's is left on
    # them (what they run is the survivor's), while the survivor's streams run to their end.
    deadline = killed_at + GATEWAY_TIMEOUT_S + 1
    assert wait_until(
        lambda: only_its_own_run(survivor.stats()), max(0.0, deadline - time.monotonic()), 0.05
    )
    assert short_ones.join().all_whole()
    long_ones.join()
    assert not any(isinstance(o, list) and o[-1:] == ["data: [DONE]"] for o in long_ones.outcomes)
    # The survivor's short streams may end before the workers' timeout: by the deadline (and
    # a heartbeat or two for their figures to arrive), every page is free.
    left_s = max(0.0, deadline - time.monotonic()) + 2 * HEARTBEAT_S
    assert wait_until(lambda: pages_free(survivor.stats()), left_s, 0.05)
    figures = survivor.stats()
    # Aborted, not finished: the choices that finished since are the survivor's 6.
    assert sum(worker_figures(figures, "finished_tasks").values()) - finished_before == 6
    assert worker_figures(figures, "gateways") == {"w0": 1, "w1": 1}
    assert all(n >= 1 for n in worker_figures(figures, "gateway_failures").values())

    # A new gateway on the same address: both workers, still the same processes, join it.
    reborn = Server("gateway", port=doomed.port, worker_bind=doomed.worker_bind)
    fleet.gateways[0] = reborn
    reborn.wait_ready(workers=2, timeout_s=30)
    assert worker_figures(reborn.stats(), "pid") == pids
    assert Streams(reborn.url, 2, 8).start().join().all_whole()
