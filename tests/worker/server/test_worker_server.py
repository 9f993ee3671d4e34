"""WorkerServer's I/O loop in process: the real server on a thread, a fake engine, and a
scripted gateway on a real ROUTER socket. Registration, heartbeats, Submit and its events,
Abort, draining, gateway restarts and silence, and malformed frames."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from common.errors import RejectCode
from common.ports import free_loopback_port
from common.sampling_params import SamplingParams
from common.schemas import (
    Abort,
    Accepted,
    Finished,
    Heartbeat,
    Register,
    Rejected,
    Submit,
    Tokens,
)
from common.token_output import FinishReason, TokenLogprob, ToolCallDelta, TopLogprob
from tests.worker.server.fake_engine import FakeEngine
from tests.worker.server.scripted_gateway import ScriptedGateway
from worker.engine.sequence import TokenEvent, Usage
from worker.server.worker_config import WorkerConfig
from worker.server.worker_server import WorkerServer

BEAT_S = 0.05
GATEWAY_TIMEOUT_S = 1.0
BEATS = (Heartbeat,)
BEATS_AND_REGISTERS = (Heartbeat, Register)


@dataclass
class Running:
    server: WorkerServer
    engine: FakeEngine
    gateway: ScriptedGateway
    thread: threading.Thread  # runs server.run


def link_config(*addresses: str) -> WorkerConfig:
    return WorkerConfig(
        gateways=addresses,
        worker_id="w-test",
        heartbeat_s=BEAT_S,
        gateway_timeout_s=GATEWAY_TIMEOUT_S,
        register_every=1000,  # only the registrations a test provokes
        drain_timeout_s=5.0,
    )


@contextmanager
def serving(server: WorkerServer) -> Iterator[threading.Thread]:
    """The server's loop on a thread of its own; stopped, joined and its sockets closed at
    the end."""
    thread = threading.Thread(target=server.run, name="worker-io-under-test")
    thread.start()
    try:
        yield thread
    finally:
        server.stop()
        thread.join(5)
        assert not thread.is_alive(), "the worker's loop did not stop"
        server.close()


@contextmanager
def running_worker() -> Iterator[Running]:
    """The server dialing one scripted gateway."""
    gateway = ScriptedGateway()
    engine = FakeEngine()
    server = WorkerServer(engine, link_config(gateway.address))  # type: ignore[arg-type]
    try:
        with serving(server) as thread:
            yield Running(server, engine, gateway, thread)
    finally:
        gateway.close()


def incarnation_at(server: WorkerServer, gateway: ScriptedGateway) -> str:
    """The worker's incarnation as that gateway knows it."""
    return server.links[gateway.address].incarnation


def connect(gateway: ScriptedGateway, incarnation: str = "gw-1") -> Register:
    """Answer the worker's beats until it is settled: two heartbeats in a row with no
    Register between them (registrations still in flight are read by then)."""
    gateway.beat_incarnation = incarnation
    register = gateway.expect(Register, skip=BEATS)
    beats_in_a_row = 0
    while beats_in_a_row < 2:
        beats_in_a_row = beats_in_a_row + 1 if isinstance(gateway.receive(), Heartbeat) else 0
    assert isinstance(register, Register)
    return register


def submit(gateway: ScriptedGateway, request_id: str) -> None:
    gateway.send(Submit(request_id, SamplingParams(), prompt="hi"))
    assert gateway.expect(Accepted, skip=BEATS) == Accepted(request_id, 2)


def test_it_registers_then_beats_with_the_engines_figures():
    with running_worker() as w:
        server, engine, gateway = w.server, w.engine, w.gateway
        register = gateway.receive()
        assert register == Register(
            "w-test",
            incarnation_at(server, gateway),
            "fake",
            64,
            4,
            100,
            16,
            os.getpid(),
            socket.gethostname(),
            ("fake-*",),
            kernels="CPU fake: no kernels",  # the engine's startup line
        )
        beat = gateway.receive()
        assert beat == Heartbeat(
            worker_id="w-test",
            incarnation=incarnation_at(server, gateway),
            waiting=2,
            running=1,
            kv_pages_free=95,  # free + cached
            kv_pages_total=100,
            prefix_cache_hit_tokens=7,
            stats=replace(engine.stats(), gateways=0),
            draining=False,
        )
        assert not server.connected  # nobody answered yet: it registers on every beat
        assert gateway.expect(Register, skip=BEATS) == register


def test_a_gateway_that_comes_up_after_the_dial_gets_the_register_at_once():
    """The first register fails while the connection is not up (ZMQ_IMMEDIATE); it is tried
    again within milliseconds, not a heartbeat later: here the next heartbeat is seconds
    away, after the wait."""
    address = f"tcp://127.0.0.1:{free_loopback_port()}"
    config = replace(link_config(address), heartbeat_s=3.0, gateway_timeout_s=10.0)
    server = WorkerServer(FakeEngine(), config)  # type: ignore[arg-type]
    with serving(server):
        time.sleep(0.2)  # the first beat has gone to nobody by now
        gateway = ScriptedGateway(address)
        try:
            register = gateway.expect(Register, timeout_s=1.5, skip=BEATS)
            assert register.incarnation == incarnation_at(server, gateway)
        finally:
            gateway.close()


def test_submit_is_accepted_then_its_events_are_forwarded_as_typed_messages():
    with running_worker() as w:
        engine, gateway = w.engine, w.gateway
        connect(gateway)
        gateway.send(Submit("r1", SamplingParams(max_tokens=3, logprobs=True), prompt="hi"))
        assert gateway.expect(Accepted, skip=BEATS) == Accepted("r1", 2)
        [(request_id, prompt, params)] = engine.submitted
        assert (request_id, prompt, params.max_tokens, params.logprobs) == ("r1", "hi", 3, True)

        logprob = TokenLogprob(
            5, "Hel", -0.5, (TopLogprob(5, "Hel", -0.5), TopLogprob(9, "He", -2))
        )
        call = ToolCallDelta(0, "c1", "get_weather", '{"city":')
        engine.emit(TokenEvent("r1", 0, "Hel", (5,), (logprob,)))
        engine.emit(
            TokenEvent(
                "r1",
                0,
                "",
                (6,),
                finish_reason=FinishReason.TOOL_CALLS,
                usage=Usage(2, 2, 0),
                tool_calls=(call,),
            )
        )
        assert gateway.expect(Tokens, skip=BEATS) == Tokens("r1", 0, "Hel", [5], [logprob])
        assert gateway.expect(Tokens, skip=BEATS) == Tokens("r1", 0, "", [6], None, [call])
        finished = gateway.expect(Finished, skip=BEATS)
        assert finished == Finished("r1", 0, FinishReason.TOOL_CALLS, 2, 2, 0)
        assert isinstance(finished, Finished) and finished.finish_reason is FinishReason.TOOL_CALLS


def test_a_choices_end_is_followed_by_the_figures_after_it_in_the_same_message():
    """The gateway learns the worker's figures after a request's end (its pages free, its
    counters) with the end itself, before it answers the client: /stats then reflects a
    finished request at once, not a heartbeat later."""
    with running_worker() as w:
        engine, gateway = w.engine, w.gateway
        connect(gateway)
        submit(gateway, "r1")
        engine.emit(TokenEvent("r1", 0, "a", (5,)))  # no end: no figures with it
        assert gateway.expect(Tokens, skip=BEATS) == Tokens("r1", 0, "a", [5])
        engine.finished_tasks = 1  # the scheduler counts an end before it emits it
        engine.emit(TokenEvent("r1", 0, "", (6,), finish_reason=FinishReason.STOP))
        assert gateway.expect(Tokens, skip=BEATS) == Tokens("r1", 0, "", [6])
        assert isinstance(gateway.receive(), Finished)
        beat = gateway.receive()  # the very next part of the same message
        assert isinstance(beat, Heartbeat) and beat.stats is not None
        assert beat.stats.finished_tasks == 1


def test_bad_requests_are_rejected_with_their_code_and_the_loop_goes_on():
    with running_worker() as w:
        engine, gateway = w.engine, w.gateway
        connect(gateway)
        # A gateway of other rules (model_construct skips them): checked on arrival.
        bad = SamplingParams.model_construct(temperature=-1)
        gateway.send(Submit("bad", bad, prompt="hi"))
        rejected = gateway.expect(Rejected, skip=BEATS)
        assert isinstance(rejected, Rejected)
        assert (rejected.code, rejected.param) == (RejectCode.INVALID_REQUEST, "temperature")
        gateway.send(Submit("long", SamplingParams(), prompt="x" * 100))
        rejected = gateway.expect(Rejected, skip=BEATS)
        assert isinstance(rejected, Rejected)
        assert (rejected.code, rejected.param) == (RejectCode.CONTEXT_LENGTH_EXCEEDED, "prompt")
        gateway.send(Submit("ok", SamplingParams(), prompt="fine"))
        assert gateway.expect(Accepted, skip=BEATS) == Accepted("ok", 4)
        assert [request_id for request_id, _, _ in engine.submitted] == ["ok"]


def test_abort_reaches_the_engine():
    with running_worker() as w:
        engine, gateway = w.engine, w.gateway
        connect(gateway)
        gateway.send(Submit("r1", SamplingParams(), prompt="hi"))
        gateway.expect(Accepted, skip=BEATS)
        gateway.send(Abort("r1"))
        gateway.wait_until(lambda: engine.aborted == ["r1"])
        assert engine.num_abort_all == 0


def test_a_draining_worker_rejects_submits_says_so_and_stops_once_idle():
    with running_worker() as w:
        server, engine, gateway = w.server, w.engine, w.gateway
        connect(gateway)
        engine.idle = False  # a request still runs
        server.drain()
        gateway.send(Submit("r1", SamplingParams(), prompt="hi"))
        assert gateway.expect(Rejected, skip=BEATS) == Rejected(
            "r1", RejectCode.DRAINING, "this worker is shutting down"
        )
        beat = gateway.expect(Heartbeat)
        assert isinstance(beat, Heartbeat) and beat.draining
        assert engine.submitted == []
        engine.idle = True
        w.thread.join(2)  # drained: the loop returns on its own
        assert not w.thread.is_alive()


def test_an_idle_worker_told_to_drain_says_so_before_it_stops():
    """Its gateways stop routing to it at once, not a heartbeat timeout after it is gone."""
    with running_worker() as w:
        server, gateway = w.server, w.gateway
        connect(gateway)
        server.drain()
        w.thread.join(2)
        assert not w.thread.is_alive()
        said = []
        with contextlib.suppress(TimeoutError):
            while True:
                said.append(gateway.receive(timeout_s=0.5))
        beats = [m for m in said if isinstance(m, Heartbeat)]
        assert beats and beats[-1].draining


def test_a_restarted_gateway_gets_its_requests_aborted_and_a_registration_at_once():
    with running_worker() as w:
        server, engine, gateway = w.server, w.engine, w.gateway
        first = connect(gateway, "gw-1")
        submit(gateway, "r1")
        gateway.beat_incarnation = "gw-2"  # another gateway answers the next heartbeat
        register = gateway.expect(Register, timeout_s=5 * BEAT_S, skip=BEATS)
        assert (engine.aborted, engine.num_abort_all) == (["r1"], 0)
        assert register == first  # the same incarnation: the worker did not restart
        assert server.links[gateway.address].gateway_incarnation == "gw-2"
        # What the old gateway's request still says goes nowhere: the new one never sent it.
        engine.emit(TokenEvent("r1", 0, "late", (7,), finish_reason=FinishReason.ABORT))
        submit(gateway, "r2")
        engine.emit(TokenEvent("r2", 0, "new", (8,)))
        assert gateway.expect(Tokens, skip=BEATS_AND_REGISTERS) == Tokens("r2", 0, "new", [8])


def test_being_dropped_by_the_same_gateway_aborts_its_requests_and_registers_anew():
    with running_worker() as w:
        server, engine, gateway = w.server, w.engine, w.gateway
        first = connect(gateway)
        submit(gateway, "r1")
        gateway.registered = False
        register = gateway.expect(Register, timeout_s=5 * BEAT_S, skip=BEATS)
        assert (engine.aborted, engine.num_abort_all) == (["r1"], 0)
        assert isinstance(register, Register) and register.incarnation != first.incarnation
        assert register.incarnation == incarnation_at(server, gateway)


def test_gateway_silence_past_the_timeout_aborts_its_requests_and_registers_anew():
    with running_worker() as w:
        server, engine, gateway = w.server, w.engine, w.gateway
        first = connect(gateway)
        submit(gateway, "r1")
        gateway.beat_incarnation = None  # no more answers
        silent_from = time.monotonic()
        register = gateway.expect(Register, timeout_s=GATEWAY_TIMEOUT_S + 1, skip=BEATS)
        assert time.monotonic() - silent_from >= GATEWAY_TIMEOUT_S - 2 * BEAT_S
        assert (engine.aborted, engine.num_abort_all) == (["r1"], 0)
        assert isinstance(register, Register) and register.incarnation != first.incarnation
        assert not server.connected
        assert server.gateway_failures == 1


def test_a_malformed_frame_is_dropped_and_counted_and_the_loop_keeps_running():
    with running_worker() as w:
        server, gateway = w.server, w.gateway
        connect(gateway)
        gateway.send_raw(b"\xc1")  # not msgpack
        gateway.send(Accepted("r0", 1))  # well formed, but no gateway sends it
        gateway.wait_until(lambda: sum(server.drops.counts.values()) == 2)
        assert dict(server.drops.counts) == {"malformed": 1, "unexpected": 1}
        beat = gateway.expect(Heartbeat, skip=(Register,))
        while isinstance(beat, Heartbeat) and beat.stats and beat.stats.dropped_frames < 2:
            beat = gateway.expect(Heartbeat)  # one sent before the drops may be in flight
        assert isinstance(beat, Heartbeat) and beat.stats is not None
        assert beat.stats.dropped_frames == 2
        gateway.send(Submit("r1", SamplingParams(), prompt="hi"))
        assert gateway.expect(Accepted, skip=BEATS) == Accepted("r1", 2)
