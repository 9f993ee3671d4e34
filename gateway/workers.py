"""WorkerHub: the gateway's ZeroMQ ROUTER socket, worker liveness, and per-request channels."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq
import zmq.asyncio
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

from common.curve import make_server
from common.schemas import Abort, GatewayBeat, Heartbeat, Message, Register
from common.wire import MAX_FRAMES_PER_MESSAGE, DropCounter, encode
from common.wire_defaults import DEFAULT_MAX_FRAME_BYTES
from gateway.registry import WorkerRegistry, WorkerState

log = logging.getLogger(__name__)
RECENTLY_CLOSED = 4096  # request ids remembered after their channel closed


@dataclass(frozen=True)
class WorkerLost:
    """Put into a request's channel when its worker dies or restarts, or when the gateway
    stops and cuts the requests still running at the end of its drain."""

    worker_id: str
    reason: str
    shutting_down: bool = False

    @property
    def detail(self) -> str:
        """What the client is told."""
        return self.reason if self.shutting_down else f"worker lost: {self.reason}"


class RequestChannel:
    """The messages one worker sends about one request, in order."""

    def __init__(self, request_id: str, worker_id: str) -> None:
        self.request_id = request_id
        self.worker_id = worker_id
        self.queue: asyncio.Queue[Message | WorkerLost] = asyncio.Queue()

    async def get(self, timeout_s: float | None = None) -> Message | WorkerLost:
        return await asyncio.wait_for(self.queue.get(), timeout_s)


class WorkerHub:
    def __init__(
        self,
        bind: str,
        registry: WorkerRegistry,
        heartbeat_timeout_s: float = 3.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        curve_secret_key: str | None = None,
        curve_authorized_keys: str | None = None,
    ) -> None:
        self.bind = bind
        self.curve_secret_key = curve_secret_key
        self.curve_authorized_keys = curve_authorized_keys
        self._authenticator: AsyncioAuthenticator | None = None
        self.registry = registry
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.drops = DropCounter()
        self.incarnation = uuid.uuid4().hex  # workers notice when the gateway restarts
        # Called with the id of a worker that is gone, e.g. the routing policy's forget.
        self.on_worker_gone: list[Callable[[str], None]] = []
        self._channels: dict[str, RequestChannel] = {}
        # Requests closed lately: their workers' last messages (the Finished of an abort)
        # still arrive, and are expected, not orphans.
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._context: zmq.asyncio.Context | None = None
        self._socket: zmq.asyncio.Socket | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._context = zmq.asyncio.Context()
        sock = self._context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # unroutable sends raise instead of vanishing
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes)
        sock.setsockopt(zmq.LINGER, 0)
        if self.curve_secret_key is not None:
            # ZAP decides which client keys may complete the handshake: an allow-list
            # folder of worker public keys, or any CURVE client that knows our key.
            self._authenticator = AsyncioAuthenticator(self._context)
            self._authenticator.start()
            location = self.curve_authorized_keys or zmq.auth.CURVE_ALLOW_ANY
            self._authenticator.configure_curve(domain="*", location=location)
            make_server(sock, self.curve_secret_key)
        sock.bind(self.bind)
        self._socket = sock
        self._tasks = [
            asyncio.create_task(self._receive_loop(), name="worker-hub-receive"),
            asyncio.create_task(self._reap_loop(), name="worker-hub-reap"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._socket is not None:
            self._socket.close()
        if self._authenticator is not None:
            self._authenticator.stop()
        if self._context is not None:
            self._context.term()

    # -- requests ---------------------------------------------------------------------------
    def open(self, request_id: str, worker: WorkerState) -> RequestChannel:
        channel = RequestChannel(request_id, worker.worker_id)
        self._channels[request_id] = channel
        worker.in_flight.add(request_id)
        return channel

    def close(self, channel: RequestChannel) -> None:
        if self._channels.pop(channel.request_id, None) is not None:
            self._closed[channel.request_id] = None
            if len(self._closed) > RECENTLY_CLOSED:
                self._closed.popitem(last=False)
        worker = self.registry.get(channel.worker_id)
        if worker is not None:
            worker.in_flight.discard(channel.request_id)

    async def send(self, worker: WorkerState, message: Message) -> bool:
        """False if the worker cannot be reached (gone from the socket)."""
        assert self._socket is not None, "start() the hub first"
        try:
            await self._socket.send_multipart([worker.identity, encode(message)])
        except zmq.ZMQError as exc:
            log.warning("worker %s unreachable: %s", worker.worker_id, exc)
            return False
        return True

    def _reply(self, identity: bytes, message: Message) -> None:
        """Send without blocking the receive loop; an unroutable peer is ignored."""
        assert self._socket is not None
        future = asyncio.ensure_future(self._socket.send_multipart([identity, encode(message)]))
        future.add_done_callback(_retrieve_exception)

    @property
    def num_open(self) -> int:
        return len(self._channels)

    async def cut_all(self, reason: str) -> int:
        """End every open request: its worker is told to abort it, and its response ends with
        `reason` as the protocol's error. Returns how many were cut."""
        channels = list(self._channels.values())
        for channel in channels:
            worker = self.registry.get(channel.worker_id)
            if worker is not None:
                await self.send(worker, Abort(channel.request_id))
            channel.queue.put_nowait(WorkerLost(channel.worker_id, reason, shutting_down=True))
        return len(channels)

    # -- socket loop --------------------------------------------------------------------------
    async def _receive_loop(self) -> None:
        assert self._socket is not None
        while True:
            frames = await self._socket.recv_multipart()
            # [identity, message, ...]: a worker sends a step's events as one multipart.
            if not 2 <= len(frames) <= MAX_FRAMES_PER_MESSAGE + 1:
                self.drops.counts["framing"] += 1
                continue
            identity = frames[0]
            for frame in frames[1:]:
                message = self.drops.decode(frame, self.max_frame_bytes)
                if message is not None:
                    self._dispatch(identity, message)

    def _dispatch(self, identity: bytes, message: Message) -> None:
        now = time.monotonic()
        if isinstance(message, Register):
            replaced = self.registry.register(identity, message, now)
            if replaced is not None:
                log.warning("worker %s restarted", message.worker_id)
                self._fail_requests_of(replaced.worker_id, "the worker restarted")
            return
        if isinstance(message, Heartbeat):
            known = self.registry.heartbeat(message, now)
            if not known:
                self.drops.counts["stale_heartbeat"] += 1
            # Answer every heartbeat, known sender or not: it tells a worker we are here, and
            # whether we still have it.
            self._reply(identity, GatewayBeat(self.incarnation, registered=known))
            return
        request_id = getattr(message, "request_id", None)
        channel = self._channels.get(request_id) if isinstance(request_id, str) else None
        worker = self.registry.get(channel.worker_id) if channel is not None else None
        # Only the worker the request was sent to, in its current incarnation, may answer it.
        if channel is None or worker is None or worker.identity != identity:
            if channel is None and request_id in self._closed:
                return  # what an aborted request's worker still had to say
            self.drops.counts["orphan"] += 1
            return
        channel.queue.put_nowait(message)

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_timeout_s / 4)
            for dead in self.registry.expire(time.monotonic(), self.heartbeat_timeout_s):
                log.warning("worker %s missed its heartbeats; dropping it", dead.worker_id)
                self._fail_requests_of(dead.worker_id, "the worker stopped responding")

    def _fail_requests_of(self, worker_id: str, reason: str) -> None:
        for channel in list(self._channels.values()):
            if channel.worker_id == worker_id:
                channel.queue.put_nowait(WorkerLost(worker_id, reason))
        for callback in self.on_worker_gone:
            callback(worker_id)


def _retrieve_exception(future: asyncio.Future[Any]) -> None:
    """Mark a fire-and-forget send's failure as seen (the peer is gone; nothing to do)."""
    if not future.cancelled():
        future.exception()
