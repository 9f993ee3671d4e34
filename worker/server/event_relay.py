"""EventRelay: a request's events from the engine thread to the I/O thread, tagged by gateway."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import zmq

from common.wire import MAX_FRAMES_PER_MESSAGE, encode
from worker.engine.sequence import EventSink, TokenEvent
from worker.server.request_routes import RequestRoutes
from worker.server.wire_events import to_wire

ENDS = b"+"  # a link id with this suffix: some choice ended among the frames


@dataclass
class LinkEvents:
    """The events waiting for one gateway link: encoded wire messages, and whether a
    choice ended among them."""

    frames: list[bytes] = field(default_factory=list)
    ends: bool = False

    def add(self, frames: list[bytes], ends: bool) -> None:
        self.frames.extend(frames)
        self.ends = self.ends or ends

    def key(self, link_id: int) -> bytes:
        return b"%d%s" % (link_id, ENDS if self.ends else b"")


class EventRelay:
    """Events cross an inproc PUSH/PULL pair as multipart messages `[key, frame, …]`: the
    key names the gateway link the request came from (and says whether a choice ended),
    each other part is one encoded wire message. The engine thread encodes and sends (its
    own PUSH socket, one send per link at each step's end); the I/O thread reads them
    (`take`) and sends each link's frames to its gateway. A request's route ends with its
    last choice's finish event."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], routes: RequestRoutes) -> None:
        self.address = f"inproc://events-{id(self):x}"
        self._context = context
        self._routes = routes
        self._local = threading.local()

    def sink(self, link_id: int) -> EventSink:
        """The sink for the events of a request that came over link `link_id`."""
        return functools.partial(self.push, link_id)

    def push(self, link_id: int, event: TokenEvent) -> None:
        """On the scheduler's thread events wait for its next flush (each step's end) and
        leave together: one send and one wakeup of the I/O thread per forward, not per token
        (each took its share of the step's time, docs/BENCHMARKS.md). On any other thread,
        at once."""
        frames = [encode(message) for message in to_wire(event)]
        ends = event.finish_reason is not None
        if ends:
            self._routes.choice_ended(event.request_id, link_id)
        pending: dict[int, LinkEvents] | None = getattr(self._local, "pending", None)
        if pending is not None:
            pending.setdefault(link_id, LinkEvents()).add(frames, ends)
        else:
            self._push_socket().send_multipart([LinkEvents(frames, ends).key(link_id), *frames])

    def flush(self) -> None:
        """At each of the scheduler's flushes, on its thread: the events since, as one
        message per link."""
        pending: dict[int, LinkEvents] | None = getattr(self._local, "pending", None)
        if pending is None:
            self._local.pending = {}  # from now on this thread's events wait for the flush
            return
        for link_id, events in pending.items():
            self._push_socket().send_multipart([events.key(link_id), *events.frames])
        pending.clear()

    def _push_socket(self) -> zmq.Socket[bytes]:
        push = getattr(self._local, "push", None)
        if push is None:
            push = self._context.socket(zmq.PUSH)
            push.connect(self.address)
            self._local.push = push
        return push

    def bind(self) -> zmq.Socket[bytes]:
        """The I/O thread's end."""
        pull = self._context.socket(zmq.PULL)
        pull.bind(self.address)
        return pull

    @staticmethod
    def take(pull: zmq.Socket[bytes]) -> dict[int, LinkEvents]:
        """The events waiting, by link id, up to about MAX_FRAMES_PER_MESSAGE frames."""
        by_link: dict[int, LinkEvents] = {}
        num_frames = 0
        while num_frames < MAX_FRAMES_PER_MESSAGE:
            try:
                key, *frames = pull.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            link_id = int(key.removesuffix(ENDS))
            by_link.setdefault(link_id, LinkEvents()).add(frames, key.endswith(ENDS))
            num_frames += len(frames)
        return by_link
