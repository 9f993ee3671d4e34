"""WorkerServer: dials every gateway, feeds Submit/Abort to the engine, streams events back."""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from dataclasses import replace

import zmq

from common.errors import RejectCode
from common.schemas import (
    Abort,
    Accepted,
    GatewayBeat,
    Heartbeat,
    Message,
    Register,
    Rejected,
    Submit,
    Tokenize,
)
from common.signal_wakeup import SignalWakeup
from common.wire import MAX_FRAMES_PER_MESSAGE, DropCounter, WireRefusal, encode
from common.worker_stats import WorkerStats
from worker.engine.inference_engine import InferenceEngine
from worker.server import wire_requests
from worker.server.event_relay import EventRelay
from worker.server.gateway_addresses import GatewayResolver, Lookup
from worker.server.gateway_link import GatewayLink
from worker.server.kv_publisher import attach_publisher
from worker.server.request_routes import RequestRoutes
from worker.server.worker_config import WorkerConfig
from worker.server.worker_messages import heartbeat_message, register_message

log = logging.getLogger(__name__)
RECEIVE_BATCH = 64  # messages read from one gateway before the others get their turn
# A dialing link's register fails until its connection is up (ZMQ_IMMEDIATE): tried again
# this soon rather than a heartbeat later, so a start is ready as soon as the gateway is.
REGISTER_RETRY_S = 0.02


class WorkerServer:
    """Owns one DEALER socket per gateway (`GatewayLink`) on one I/O thread; the engine's
    scheduler never touches them.

    Every gateway it is given (names resolved to all their hosts, again every
    `resolve_every_s`) gets its Register and Heartbeat, and its requests go to the one
    engine: admission and the KV cache are shared by all gateways, first come first
    served. Each request's events go back to the gateway that sent it (`EventRelay`:
    tagged with its link by the engine thread), and the scheduler loop never waits on the
    network. Each gateway answers every heartbeat with a GatewayBeat; when those stop for
    `gateway_timeout_s`, or a gateway of another incarnation answers, that gateway's
    requests alone are aborted (their pages freed) and the worker registers with it again
    as soon as one answers there (ZeroMQ redials).
    """

    def __init__(
        self, engine: InferenceEngine, config: WorkerConfig, lookup: Lookup = socket.getaddrinfo
    ) -> None:
        self.engine, self.config = engine, config
        self.drops = DropCounter()
        self.links: dict[str, GatewayLink] = {}  # by endpoint
        self.routes = RequestRoutes()
        self.resolver = GatewayResolver(config.gateways, config.resolve_every_s, lookup)
        self.gateway_failures = 0  # gateways lost to silence, or never answering
        self._link_ids = itertools.count(1)
        self._context = zmq.Context()
        self._poller = zmq.Poller()
        self.relay = EventRelay(self._context, self.routes)
        self._stopping = threading.Event()
        self._draining = threading.Event()
        self.last_loop_tick = time.monotonic()
        engine.scheduler.flush_listeners.append(self.relay.flush)
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

    @property
    def connected(self) -> bool:
        """Some gateway answers."""
        return any(link.connected for link in list(self.links.values()))

    def is_live(self) -> bool:
        """The I/O loop is turning (it wakes at least every heartbeat)."""
        return time.monotonic() - self.last_loop_tick < 10 * self.config.heartbeat_s + 5

    def is_ready(self) -> bool:
        """Registered with a gateway that answers, and taking requests."""
        return self.connected and not self.draining

    def run(self, wakeup: SignalWakeup | None = None) -> None:
        """The loop, until stopped or drained; `wakeup` (the main thread's) ends its waits
        when a signal arrives, so that a drain starts at once."""
        events = self.relay.bind()
        self._poller.register(events, zmq.POLLIN)
        if wakeup is not None:
            self._poller.register(wakeup.fileno(), zmq.POLLIN)
        self.resolver.start()
        if self.kv_events is not None:
            self.kv_events.start()
        next_beat = next_register_try = 0.0
        drain_deadline: float | None = None
        try:
            while not self._stopping.is_set():
                now = self.last_loop_tick = time.monotonic()
                if self._draining.is_set():
                    if drain_deadline is None:  # say so at once: no new request comes here
                        drain_deadline = now + self.config.drain_timeout_s
                        self._beat()
                    if self.engine.is_idle() or now > drain_deadline:
                        log.info("worker %s drained", self.config.worker_id)
                        return
                self._follow_addresses()
                self._check_gateways(now)
                waiting = [link for link in self.links.values() if link.register_waiting()]
                if now >= next_beat:
                    self._beat()
                    next_beat = now + self.config.heartbeat_s
                    next_register_try = now + REGISTER_RETRY_S
                elif waiting and now >= next_register_try:
                    self._beat(waiting)
                    next_register_try = now + REGISTER_RETRY_S
                retry = [next_register_try] if waiting else []
                wake = min([next_beat, *self._silence_deadlines(), *retry])
                ready = dict(self._poller.poll(max(1, int((wake - now) * 1000) + 1)))
                if wakeup is not None and wakeup.fileno() in ready:
                    wakeup.clear()
                if events in ready:
                    self._forward(events)
                for link in list(self.links.values()):
                    if link.socket in ready:
                        self._receive(link)
        finally:
            self.resolver.stop()
            for link in self.links.values():
                link.close()
            events.close()

    # -- the gateways -----------------------------------------------------------------------
    def _follow_addresses(self) -> None:
        """Dial every endpoint the addresses name now; hang up on one no longer named once
        its gateway is silent (one that still answers, e.g. while it drains, keeps its link)."""
        wanted = self.resolver.endpoints()
        for endpoint in wanted:
            if endpoint not in self.links:
                link = GatewayLink(self._context, self.config, endpoint, self._link_ids)
                self.links[endpoint] = link
                self._poller.register(link.socket, zmq.POLLIN)
                log.info("worker %s dialing %s", self.config.worker_id, endpoint)
        for endpoint, link in list(self.links.items()):
            if endpoint not in wanted and not link.connected:
                log.info("hanging up on %s: no longer a gateway address", endpoint)
                for request_id in self.routes.take_all_of(link.link_id):
                    self.engine.abort(request_id)  # none, unless sent before it answered
                self._poller.unregister(link.socket)
                link.close()
                del self.links[endpoint]

    def _check_gateways(self, now: float) -> None:
        timeout_s = self.config.gateway_timeout_s
        for link in self.links.values():
            why = link.silence(now, timeout_s)
            if why is not None:
                self.gateway_failures += 1
                self._forget(link, why, new_incarnation=True)
            elif link.unanswered(now, timeout_s):
                self.gateway_failures += 1
                log.warning("no gateway answers at %s yet; still dialing", link.endpoint)

    def _silence_deadlines(self) -> list[float]:
        timeout_s = self.config.gateway_timeout_s
        deadlines = (link.deadline(timeout_s) for link in self.links.values())
        return [deadline for deadline in deadlines if deadline is not None]

    def _forget(self, link: GatewayLink, why: str, new_incarnation: bool) -> None:
        """Abort the requests of one gateway only (nobody reads them any more) and register
        with it anew; the other gateways' requests run on."""
        aborted = self.routes.take_all_of(link.link_id)
        for request_id in aborted:
            self.engine.abort(request_id)
        link.forget(new_incarnation)
        log.warning("%s; aborted its %d request(s)", why, len(aborted))

    def _beat(self, links: list[GatewayLink] | None = None) -> None:
        """A heartbeat to each link (all of them by default), its register with it where
        due."""
        stats = self._stats()
        for link in self.links.values() if links is None else links:
            register = link.wants_register(self.config.register_every)
            if register and link.send(encode(self._register(link.incarnation, stats))):
                link.register_now = False
            link.send(encode(self._heartbeat(link.incarnation, stats)))
            link.beats += 1

    # -- messages -----------------------------------------------------------------------------
    def _forward(self, events: zmq.Socket[bytes]) -> None:
        """The events waiting, each to the gateway of its request: one multipart message per
        gateway, so a decode step's tokens cost a gateway one receive, not one each. When a
        choice ended among them, a Heartbeat closes the message: the gateway then has the
        worker's figures after that end (pages freed, counters) before it answers the
        client, not up to a heartbeat later."""
        links = {link.link_id: link for link in self.links.values()}
        stats: WorkerStats | None = None
        for link_id, batch in self.relay.take(events).items():
            link = links.get(link_id)
            if link is None:
                continue  # its gateway is gone or restarted: nobody reads these
            frames = batch.frames
            if batch.ends:
                stats = stats or self._stats()
                frames = [*frames, encode(self._heartbeat(link.incarnation, stats))]
            for start in range(0, len(frames), MAX_FRAMES_PER_MESSAGE):
                if not link.send_multipart(frames[start : start + MAX_FRAMES_PER_MESSAGE]):
                    self.drops.counts["unsent"] += 1

    def _receive(self, link: GatewayLink) -> None:
        for _ in range(RECEIVE_BATCH):
            try:
                frame = link.socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                message = self.drops.decode(frame, self.config.max_frame_bytes, refusals=True)
            except WireRefusal as refusal:  # settings the rules refuse, checked on arrival
                why = Rejected(refusal.request_id, refusal.code, refusal.message, refusal.param)
                self._reply(link, why)
                continue
            if isinstance(message, GatewayBeat):
                lost = link.gateway_beat(message, time.monotonic())
                if lost is not None:
                    self._forget(link, *lost)
            elif isinstance(message, Submit):
                # Straight out, so the answer precedes the request's tokens (forwarded
                # by this same thread later) and its echo does too.
                for reply in self._submit(link, message):
                    self._reply(link, reply)
            elif isinstance(message, Abort):
                if self.routes.is_from(message.request_id, link.link_id):
                    self.engine.abort(message.request_id)
            elif isinstance(message, Tokenize):
                self._reply(link, wire_requests.tokenize(self.engine, message))
            elif message is not None:
                self.drops.counts["unexpected"] += 1

    def _reply(self, link: GatewayLink, message: Message) -> None:
        if not link.send(encode(message)):
            self.drops.counts["unsent"] += 1

    def _submit(self, link: GatewayLink, message: Submit) -> list[Message]:
        request_id = message.request_id
        if self._draining.is_set():
            why = "this worker is shutting down"
            return [Rejected(request_id, RejectCode.DRAINING, why)]
        prompts = 1 if message.prompts is None else len(message.prompts)
        if not self.routes.add(request_id, link.link_id, prompts * message.params.n):
            why = f"request {request_id} is running on this worker already"
            return [Rejected(request_id, RejectCode.INVALID_REQUEST, why)]
        replies = wire_requests.submit(self.engine, message, self.relay.sink(link.link_id))
        if not isinstance(replies[0], Accepted):
            self.routes.discard(request_id, link.link_id)
        return replies

    def _stats(self) -> WorkerStats:
        return replace(
            self.engine.stats(),
            dropped_frames=sum(self.drops.counts.values()),
            gateways=sum(link.connected for link in self.links.values()),
            gateway_failures=self.gateway_failures + self.resolver.failures,
        )

    def _register(self, incarnation: str, stats: WorkerStats) -> Register:
        kv = self.kv_events
        addresses = (kv.address, kv.replay_address) if kv is not None else ("", "")
        return register_message(self.engine, self.config.worker_id, incarnation, stats, addresses)

    def _heartbeat(self, incarnation: str, stats: WorkerStats) -> Heartbeat:
        draining = self._draining.is_set()
        kv_seq = self.kv_events.last_seq if self.kv_events is not None else -1
        return heartbeat_message(self.config.worker_id, incarnation, stats, draining, kv_seq)
