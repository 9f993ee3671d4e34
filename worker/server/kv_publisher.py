"""KvEventPublisher: a worker's KV-cache events on a ZeroMQ PUB socket, replayed on a ROUTER."""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time

import zmq

from common.kv_events import (
    END_SEQ,
    AllBlocksCleared,
    KvEvent,
    KvEventBatch,
    decode_seq,
    seq_bytes,
)
from worker.engine.inference_engine import InferenceEngine
from worker.kv.kv_events import KvEventRecorder
from worker.kv.paged import PageCache
from worker.server.kv_history import KvHistory
from worker.server.worker_config import WorkerConfig

log = logging.getLogger(__name__)
IDLE_POLL_S = 0.05  # how soon a replay request is answered while no batch comes
SEND_HWM = 100_000  # batches a slow subscriber may lag before PUB drops (it then resyncs)


class KvEventPublisher:
    """Publishes each scheduler step's prefix-index changes as one numbered batch.

    The engine thread only appends to a queue at its flush (never a socket, never a wait);
    this publisher's own thread numbers and encodes each batch (KvHistory), sends it as
    [topic, sequence number, payload] on PUB and answers replay requests on ROUTER. Both
    sockets are bound before the worker registers, so the Register can carry their
    addresses.
    """

    def __init__(
        self,
        context: zmq.Context[zmq.Socket[bytes]],
        topic: str,
        bind: str,
        gateway: str,
        block_size: int,
        medium: str | None,
    ) -> None:
        self.topic = topic.encode()
        self.history = KvHistory(block_size, medium)
        self.recorder = KvEventRecorder(block_size, medium)
        self._queue: queue.SimpleQueue[KvEventBatch | None] = queue.SimpleQueue()
        events_bind, replay_bind, host = bind_addresses(bind, gateway)
        self._pub = context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.SNDHWM, SEND_HWM)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._replay = context.socket(zmq.ROUTER)
        self._replay.setsockopt(zmq.LINGER, 0)
        try:
            self._pub.bind(events_bind)
            self._replay.bind(replay_bind)
        except zmq.ZMQError:
            self._pub.close()
            self._replay.close()
            raise
        self.address = _advertised(self._pub, host)
        self.replay_address = _advertised(self._replay, host)
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        # A new cache is empty: the first batch says so, to anyone who kept an older state.
        self._queue.put(KvEventBatch(time.time(), (AllBlocksCleared(),)))

    @property
    def last_seq(self) -> int:
        """The last batch published (read from any thread: an int, written by one)."""
        return self.history.last_seq

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join(2.0)
        self._pub.close()
        self._replay.close()

    def flush(self) -> None:
        """At each scheduler flush, on the engine thread: the step's events, as one batch."""
        events = self.recorder.take()
        if events:
            self.publish(events)

    def publish(self, events: list[KvEvent]) -> None:
        """Queue one batch; from any thread, never blocking."""
        self._queue.put(KvEventBatch(time.time(), tuple(events)))

    def _run(self) -> None:
        while True:
            try:
                batch: KvEventBatch | None = self._queue.get(timeout=IDLE_POLL_S)
            except queue.Empty:
                batch = _NOTHING  # nothing new: only look at replay requests
            if batch is None:
                return
            try:
                if batch is not _NOTHING:
                    seq, payload = self.history.record(batch)
                    self._pub.send_multipart([self.topic, seq_bytes(seq), payload])
                while self._replay.poll(0):
                    self._answer_replay()
            except Exception:  # a publisher's trouble must never take the worker down
                log.exception("KV event publisher failed on a batch; going on")

    def _answer_replay(self) -> None:
        """[identity, b"", 8-byte start] → one [identity, b"", seq, payload] per batch, then
        [identity, b"", -1, b""] (vLLM's replay shape; a snapshot when `start` is gone)."""
        frames = self._replay.recv_multipart()
        if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
            log.warning("malformed KV replay request of %d parts", len(frames))
            return
        identity, start = frames[0], decode_seq(frames[2])
        for seq, payload in self.history.replay(start, time.time()):
            self._replay.send_multipart([identity, b"", seq_bytes(seq), payload])
        self._replay.send_multipart([identity, b"", END_SEQ, b""])


_NOTHING = KvEventBatch(0.0, ())  # a marker, never published


def attach_publisher(
    engine: InferenceEngine, config: WorkerConfig, context: zmq.Context[zmq.Socket[bytes]]
) -> KvEventPublisher | None:
    """A publisher fed by the engine's paged cache, or None: events off, a cache without
    pages, an encrypted link with no address asked for (events are not encrypted), or an
    address that cannot be bound (logged; the worker serves, routed by load)."""
    if config.kv_events_bind == "off":
        return None
    cache = getattr(engine, "cache", None)
    if not isinstance(cache, PageCache) or not cache.pool.enable_prefix_caching:
        return None
    if config.curve_server_key is not None and config.kv_events_bind == "auto":
        log.info("KV events off: the link is encrypted and they would not be (--kv-events-bind)")
        return None
    medium = "GPU" if cache.storage.k.device.type == "cuda" else "CPU"
    try:
        bind, page_size = config.kv_events_bind, cache.page_size
        publisher = KvEventPublisher(
            context, config.worker_id, bind, config.gateways[0], page_size, medium
        )
    except zmq.ZMQError as exc:  # the address is taken or not this host's: serve without
        log.error("KV events off: cannot bind %s: %s", config.kv_events_bind, exc)
        return None
    # Before any request: the engine thread is idle, and reads these from its next step on.
    cache.pool.recorder = publisher.recorder
    if cache.disk is not None:  # its pages on disk are published too, medium DISK
        publisher.recorder.disk_events = cache.disk.take_events
    engine.scheduler.flush_listeners.append(publisher.flush)
    log.info("KV events on %s (replay %s)", publisher.address, publisher.replay_address)
    return publisher


def bind_addresses(bind: str, gateway: str) -> tuple[str, str, str]:
    """(events bind, replay bind, host to advertise). `auto`: free ports on the address this
    host reaches `gateway` (the first one given) from; tcp://HOST:PORT: PORT and PORT+1 (`*`
    or 0: free ones)."""
    if bind == "auto":
        host = local_address_toward(gateway)
        return f"tcp://{host}:*", f"tcp://{host}:*", host
    host, _, port = bind.removeprefix("tcp://").rpartition(":")
    if port in ("*", "0"):
        events, replay = f"tcp://{host}:*", f"tcp://{host}:*"
    elif port.isdigit():
        events, replay = f"tcp://{host}:{port}", f"tcp://{host}:{int(port) + 1}"
    else:
        raise ValueError(f"kv_events_bind needs a port: tcp://HOST:PORT, got {bind!r}")
    if host in ("*", "0.0.0.0", ""):
        host = local_address_toward(gateway)
    return events, replay, host


def local_address_toward(gateway: str) -> str:
    """This host's IPv4 address on the route to the gateway (loopback when it cannot tell)."""
    host = gateway.removeprefix("tcp://").rpartition(":")[0].strip("[]")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))  # UDP: picks the route, sends nothing
            address: str = probe.getsockname()[0]
            return address
    except OSError:
        return "127.0.0.1"


def _advertised(sock: zmq.Socket[bytes], host: str) -> str:
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
    port = (endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)).rpartition(":")[2]
    return f"tcp://{host}:{port}"
