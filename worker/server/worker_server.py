"""WorkerServer: dials the gateway, feeds Submit/Abort to the engine, streams events back."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import replace

import zmq

from common.curve import make_client
from common.errors import RejectCode
from common.schemas import (
    Abort,
    GatewayBeat,
    Heartbeat,
    Message,
    Register,
    Rejected,
    Submit,
    Tokenize,
)
from common.wire import MAX_FRAMES_PER_MESSAGE, DropCounter, WireRefusal, encode
from worker.engine.inference_engine import InferenceEngine
from worker.engine.sequence import TokenEvent
from worker.server import wire_requests
from worker.server.kv_publisher import attach_publisher
from worker.server.wire_events import to_wire
from worker.server.worker_config import WorkerConfig

log = logging.getLogger(__name__)


class WorkerServer:
    """Owns the DEALER socket on one I/O thread; the engine's scheduler never touches it.

    Events leave the scheduler thread through an inproc PUSH socket of its own, so the
    scheduler loop never waits on the network. The gateway answers every heartbeat with a
    GatewayBeat; when those stop for `gateway_timeout_s`, or a gateway of another
    incarnation answers, every running request is aborted (its pages freed) and the worker
    registers again as soon as a gateway is back (ZeroMQ redials on its own).
    """

    def __init__(self, engine: InferenceEngine, config: WorkerConfig) -> None:
        self.engine = engine
        self.config = config
        self.incarnation = uuid.uuid4().hex
        self.drops = DropCounter()
        self.gateway_incarnation: str | None = None
        self.connected = False
        self._context = zmq.Context()
        self._events_address = f"inproc://events-{self.incarnation}"
        self._local = threading.local()
        self._stopping = threading.Event()
        self._draining = threading.Event()
        self._last_gateway_beat = 0.0
        self._register_now = True
        self.last_loop_tick = time.monotonic()
        engine.scheduler.flush_listeners.append(self._flush_events)
        self.kv_events = attach_publisher(engine, config, self._context)

    def stop(self) -> None:
        """Stop now: running requests are aborted by the engine's shutdown."""
        self._stopping.set()

    def close(self) -> None:
        """Close every socket of this server, the scheduler thread's included; after run()
        returned and the engine stopped (no event may be pushed any more)."""
        if self.kv_events is not None:
            self.kv_events.stop()
        self._context.destroy(linger=0)

    def drain(self) -> None:
        """Take no new requests, finish the running ones, then stop."""
        self._draining.set()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def is_live(self) -> bool:
        """The I/O loop is turning (it wakes at least every heartbeat)."""
        return time.monotonic() - self.last_loop_tick < 10 * self.config.heartbeat_s + 5

    def is_ready(self) -> bool:
        """Registered with a gateway that answers, and taking requests."""
        return self.connected and not self.draining

    def _push_event(self, event: TokenEvent) -> None:
        """Event sink. On the scheduler's thread events wait for its next flush (each step's
        end) and leave together: one send and one wakeup of the I/O thread per forward, not
        per token (each took its share of the step's time, docs/BENCHMARKS.md). On any other
        thread, at once."""
        frames = [encode(message) for message in to_wire(event)]
        pending = getattr(self._local, "pending", None)
        if pending is not None:
            pending.extend(frames)
        else:
            self._push_socket().send_multipart(frames)

    def _flush_events(self) -> None:
        """At each of the scheduler's flushes, on its thread: the events since, as one
        message."""
        pending = getattr(self._local, "pending", None)
        if pending is None:
            self._local.pending = []  # from now on this thread's events wait for the flush
        elif pending:
            self._push_socket().send_multipart(pending)
            pending.clear()

    def _push_socket(self) -> zmq.Socket[bytes]:
        push = getattr(self._local, "push", None)
        if push is None:
            push = self._context.socket(zmq.PUSH)
            push.connect(self._events_address)
            self._local.push = push
        return push

    def run(self) -> None:
        dealer = self._context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IDENTITY, self.config.worker_id.encode())
        dealer.setsockopt(zmq.MAXMSGSIZE, self.config.max_frame_bytes)
        dealer.setsockopt(zmq.LINGER, 0)
        if self.config.curve_server_key is not None:
            make_client(dealer, self.config.curve_server_key, self.config.curve_secret_key)
        dealer.connect(self.config.gateway)
        events = self._context.socket(zmq.PULL)
        events.bind(self._events_address)
        poller = zmq.Poller()
        poller.register(dealer, zmq.POLLIN)
        poller.register(events, zmq.POLLIN)
        if self.kv_events is not None:
            self.kv_events.start()
        next_beat = 0.0
        beats = 0
        drain_deadline: float | None = None
        try:
            while not self._stopping.is_set():
                now = self.last_loop_tick = time.monotonic()
                if self._draining.is_set():
                    drain_deadline = drain_deadline or now + self.config.drain_timeout_s
                    if self.engine.is_idle() or now > drain_deadline:
                        log.info("worker %s drained", self.config.worker_id)
                        return
                silent_s = now - self._last_gateway_beat
                if self.connected and silent_s > self.config.gateway_timeout_s:
                    self._forget_gateway(f"gateway silent for {silent_s:.1f} s")
                if now >= next_beat:
                    periodic = beats % self.config.register_every == 0
                    if not self.connected or self._register_now or periodic:
                        dealer.send(encode(self._register()))
                        self._register_now = False
                    dealer.send(encode(self._heartbeat()))
                    beats += 1
                    next_beat = now + self.config.heartbeat_s
                timeout_ms = max(1, int((next_beat - now) * 1000))
                ready = dict(poller.poll(timeout_ms))
                if events in ready:
                    self._forward(events, dealer)
                if dealer in ready:
                    self._receive(dealer)
        finally:
            dealer.close()
            events.close()

    def _forget_gateway(self, why: str) -> None:
        """Abort every request and come back as a new incarnation: the gateway may have
        dropped us meanwhile and failed those requests, and must tell us from that worker."""
        log.warning("%s; aborting its requests and registering anew", why)
        self.connected = False
        self.engine.abort_all()
        self.incarnation = uuid.uuid4().hex
        self._register_now = True

    def _forward(self, events: zmq.Socket[bytes], dealer: zmq.Socket[bytes]) -> None:
        """Every event waiting goes out in one multipart message: a decode step's tokens
        for all its sequences cost the gateway one receive, not one each."""
        frames: list[bytes] = []
        while len(frames) < MAX_FRAMES_PER_MESSAGE:
            try:
                frames.append(events.recv(zmq.NOBLOCK))
            except zmq.Again:
                break
        if frames:
            dealer.send_multipart(frames)

    def _receive(self, dealer: zmq.Socket[bytes]) -> None:
        while True:
            try:
                frame = dealer.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                message = self.drops.decode(frame, self.config.max_frame_bytes, refusals=True)
            except WireRefusal as refusal:  # settings the rules refuse, checked on arrival
                why = Rejected(refusal.request_id, refusal.code, refusal.message, refusal.param)
                dealer.send(encode(why))
                continue
            if isinstance(message, GatewayBeat):
                self._gateway_beat(message)
            elif isinstance(message, Submit):
                # Straight out, so the answer precedes the request's tokens (forwarded
                # by this same thread later) and its echo does too.
                for reply in self._submit(message):
                    dealer.send(encode(reply))
            elif isinstance(message, Abort):
                self.engine.abort(message.request_id)
            elif isinstance(message, Tokenize):
                dealer.send(encode(wire_requests.tokenize(self.engine, message)))
            elif message is not None:
                self.drops.counts["unexpected"] += 1

    def _gateway_beat(self, message: GatewayBeat) -> None:
        if self.gateway_incarnation not in (None, message.incarnation):
            # A new gateway knows nothing of the old one's requests: nobody will read them.
            log.warning("the gateway restarted; aborting the old gateway's requests")
            self.engine.abort_all()
            self._register_now = True
        elif not message.registered and self.connected and not self._register_now:
            # The same gateway dropped us (we were stopped, or frozen, past its heartbeat
            # timeout) and failed our requests: nobody reads them any more.
            self._forget_gateway("the gateway had dropped this worker")
        self.gateway_incarnation = message.incarnation
        self._last_gateway_beat = time.monotonic()
        self.connected = True

    def _submit(self, message: Submit) -> list[Message]:
        if self._draining.is_set():
            why = "this worker is shutting down"
            return [Rejected(message.request_id, RejectCode.DRAINING, why)]
        return wire_requests.submit(self.engine, message, self._push_event)

    def _register(self) -> Register:
        stats = self.engine.stats()
        return Register(
            worker_id=self.config.worker_id,
            incarnation=self.incarnation,
            model=self.engine.model_name,
            aliases=self.engine.model_aliases,
            max_context=self.engine.max_model_len,
            max_seqs=self.engine.options.max_seqs,
            kv_pages=stats.kv_pages_total,
            page_size=stats.kv_page_size,
            pid=os.getpid(),
            host=socket.gethostname(),
            kv_events=self.kv_events.address if self.kv_events else "",
            kv_replay=self.kv_events.replay_address if self.kv_events else "",
        )

    def _heartbeat(self) -> Heartbeat:
        stats = replace(self.engine.stats(), dropped_frames=sum(self.drops.counts.values()))
        return Heartbeat(
            worker_id=self.config.worker_id,
            incarnation=self.incarnation,
            waiting=stats.waiting_queue,
            running=stats.active_tasks,
            kv_pages_free=stats.kv_pages_free + stats.kv_pages_cached,
            kv_pages_total=stats.kv_pages_total,
            prefix_cache_hit_tokens=stats.prefix_cache_hit_tokens,
            stats=stats,
            draining=self._draining.is_set(),
            kv_events_seq=self.kv_events.last_seq if self.kv_events else -1,
        )
