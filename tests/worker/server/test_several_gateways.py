"""One WorkerServer, several scripted gateways: each gets the worker's registration and beats,
its own requests' events, and loses only its own requests; names resolve to every gateway."""

from __future__ import annotations

import dataclasses
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from common.errors import RejectCode
from common.ports import free_loopback_port
from common.sampling_params import SamplingParams
from common.schemas import Abort, Heartbeat, Register, Rejected, Submit, Tokens
from common.token_output import FinishReason
from tests.worker.server.fake_engine import FakeEngine
from tests.worker.server.scripted_gateway import ScriptedGateway, wait_all
from tests.worker.server.test_worker_server import (
    BEATS,
    BEATS_AND_REGISTERS,
    GATEWAY_TIMEOUT_S,
    connect,
    link_config,
    serving,
    submit,
)
from worker.engine.sequence import TokenEvent, Usage
from worker.server.gateway_addresses import Lookup
from worker.server.worker_server import WorkerServer


@contextmanager
def worker_dialing(
    *addresses: str, lookup: Lookup = socket.getaddrinfo, resolve_every_s: float = 5.0
) -> Iterator[tuple[WorkerServer, FakeEngine]]:
    engine = FakeEngine()
    config = dataclasses.replace(link_config(*addresses), resolve_every_s=resolve_every_s)
    server = WorkerServer(engine, config, lookup)  # type: ignore[arg-type]  # duck-typed
    with serving(server):
        yield server, engine


@contextmanager
def gateways(*addresses: str | None) -> Iterator[list[ScriptedGateway]]:
    made = [ScriptedGateway(address) for address in addresses]
    try:
        yield made
    finally:
        for gateway in made:
            gateway.close()


def last_beat(gateway: ScriptedGateway, *others: ScriptedGateway) -> Heartbeat:
    """A heartbeat sent after everything read so far (others are kept answered meanwhile)."""
    beats: list[Heartbeat] = []
    while len(beats) < 2:  # the first may have left before what the test waits to see
        wait_all([gateway, *others], lambda: bool(gateway._pending))
        message = gateway.receive()
        if isinstance(message, Heartbeat):
            beats.append(message)
    return beats[-1]


def test_each_gateway_gets_the_worker_and_the_events_of_its_own_requests():
    with gateways(None, None) as (a, b), worker_dialing(a.address, b.address) as (_, engine):
        register_a, register_b = connect(a, "gw-a"), connect(b, "gw-b")
        # Each gateway knows the worker as its own incarnation, same worker id and figures.
        assert register_a.incarnation != register_b.incarnation
        assert dataclasses.replace(register_a, incarnation="") == dataclasses.replace(
            register_b, incarnation=""
        )
        submit(a, "ra")
        submit(b, "rb")
        engine.emit(TokenEvent("rb", 0, "B", (2,)))
        engine.emit(TokenEvent("ra", 0, "A", (1,)))
        assert a.expect(Tokens, skip=BEATS) == Tokens("ra", 0, "A", [1])
        assert b.expect(Tokens, skip=BEATS) == Tokens("rb", 0, "B", [2])

        # A gateway may abort only its own requests.
        a.send(Abort("rb"))
        submit(a, "ra2")  # answered after the Abort before it: that one is read by now
        assert engine.aborted == []
        b.send(Abort("rb"))
        wait_all([a, b], lambda: engine.aborted == ["rb"])

        # An id running for one gateway is refused to another, until its last choice ends.
        b.send(Submit("ra", SamplingParams(), prompt="hi"))
        rejected = b.expect(Rejected, skip=BEATS)
        assert isinstance(rejected, Rejected) and rejected.code is RejectCode.INVALID_REQUEST
        done = TokenEvent("ra", 0, "", (3,), finish_reason=FinishReason.STOP, usage=Usage(2, 2, 0))
        engine.emit(done)
        assert a.expect(Tokens, skip=BEATS) == Tokens("ra", 0, "", [3])
        submit(b, "ra")
        beat = last_beat(b, a)
        assert beat.stats is not None and beat.stats.gateways == 2


def test_a_silent_gateway_loses_only_its_requests_and_the_others_serve_on():
    with gateways(None, None) as (a, b), worker_dialing(a.address, b.address) as (server, engine):
        first_a = connect(a, "gw-a")
        connect(b, "gw-b")
        submit(a, "ra")
        submit(b, "rb")
        a.beat_incarnation = None  # gateway a stops answering
        wait_all([a, b], lambda: engine.aborted == ["ra"], timeout_s=GATEWAY_TIMEOUT_S + 1)
        assert engine.num_abort_all == 0
        assert server.links[b.address].connected and not server.links[a.address].connected
        engine.emit(TokenEvent("rb", 0, "still", (4,)))
        assert b.expect(Tokens, skip=BEATS_AND_REGISTERS) == Tokens("rb", 0, "still", [4])
        submit(b, "rb2")
        beat = last_beat(b, a)
        assert beat.stats is not None
        assert (beat.stats.gateways, beat.stats.gateway_failures) == (1, 1)
        # The gateway answers again: the worker comes back to it as a new incarnation.
        a.beat_incarnation = "gw-a"
        wait_all([a, b], lambda: server.links[a.address].connected)
        register = a.expect(Register, skip=BEATS)
        while isinstance(register, Register) and register.incarnation == first_a.incarnation:
            register = a.expect(Register, skip=BEATS)  # sent before it went silent
        assert isinstance(register, Register)
        assert register.incarnation == server.links[a.address].incarnation


def test_an_address_nobody_answers_is_logged_and_counted_and_the_others_serve(caplog):
    nobody = f"tcp://127.0.0.1:{free_loopback_port()}"
    caplog.set_level(logging.WARNING, logger="worker.server.worker_server")
    with gateways(None) as (b,), worker_dialing(nobody, b.address) as (server, _):
        connect(b)
        wait_all([b], lambda: server.gateway_failures == 1, timeout_s=GATEWAY_TIMEOUT_S + 1)
        submit(b, "rb")
        beat = last_beat(b)
        assert beat.stats is not None
        assert (beat.stats.gateways, beat.stats.gateway_failures) == (1, 1)
        assert f"no gateway answers at {nobody}" in caplog.text
        assert server.is_ready()


class FakeDns:
    """A name that resolves to the IPs in `ips` (loopback ones), or fails when `failing`."""

    def __init__(self, *ips: str) -> None:
        self.ips = list(ips)
        self.failing = False

    def __call__(self, host: str, port: int, *_: Any) -> list[tuple[Any, ...]]:
        assert host == "gateways.test"
        if self.failing:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in self.ips]


def test_a_name_is_every_gateway_it_resolves_to_and_is_looked_up_again():
    port = free_loopback_port()
    first, second = f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.2:{port}"
    dns = FakeDns("127.0.0.1")
    name = f"tcp://gateways.test:{port}"
    with (
        gateways(first, second) as (a, b),
        worker_dialing(name, lookup=dns, resolve_every_s=0.05) as (server, engine),
    ):
        connect(a, "gw-a")
        assert list(server.links) == [first]
        dns.ips.append("127.0.0.2")  # a second gateway pod became ready
        connect(b, "gw-b")
        assert list(server.links) == [first, second]
        dns.failing = True  # a DNS hiccup drops nobody
        wait_all([a, b], lambda: server.resolver.failures >= 2)
        assert list(server.links) == [first, second]
        dns.failing, dns.ips = False, ["127.0.0.2"]  # the first pod is leaving
        submit(a, "ra")
        wait_all([a, b], lambda: server.resolver.endpoints() == [second])
        # While it still answers (draining, say) it keeps its link and its requests.
        last_beat(a, b)
        assert list(server.links) == [first, second] and engine.aborted == []
        a.beat_incarnation = None  # gone: its requests are aborted, its link closed
        wait_all([a, b], lambda: list(server.links) == [second], timeout_s=GATEWAY_TIMEOUT_S + 1)
        assert engine.aborted == ["ra"]
        submit(b, "rb")


@pytest.mark.parametrize(
    ("address", "infos", "expected"),
    [
        ("tcp://gw:5557", [("10.0.0.2",), ("10.0.0.1",), ("10.0.0.2",)], ["10.0.0.1", "10.0.0.2"]),
        ("tcp://localhost:5557", [("::1", 0, 0, 0), ("127.0.0.1",)], ["127.0.0.1"]),
        ("tcp://gw6:5557", [("fd00::2", 0, 0, 0)], ["[fd00::2]"]),
    ],
)
def test_lookup_gives_one_endpoint_per_address_ipv4_first(address, infos, expected):
    from worker.server.gateway_addresses import lookup_address

    def lookup(host: str, port: int, *_: Any) -> list[tuple[Any, ...]]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", info) for info in infos]

    assert lookup_address(address, lookup) == [f"tcp://{ip}:5557" for ip in expected]


@pytest.mark.parametrize(
    ("address", "looked_up"),
    [
        ("tcp://astrai-gateway-workers:5557", True),
        ("tcp://10.0.0.1:5557", False),
        ("tcp://[fd00::1]:5557", False),
        ("ipc:///tmp/gateway", False),
        ("inproc://gateway", False),
    ],
)
def test_only_host_names_are_looked_up(address, looked_up):
    from worker.server.gateway_addresses import needs_lookup

    assert needs_lookup(address) is looked_up
