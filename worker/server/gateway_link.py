"""GatewayLink: a worker's connection to one gateway: its socket and liveness both ways."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import zmq

from common.curve import make_client
from common.schemas import GatewayBeat
from worker.server.worker_config import WorkerConfig

log = logging.getLogger(__name__)


class GatewayLink:
    """One DEALER dialing one gateway endpoint, and what the worker knows of that gateway.

    `incarnation` is the worker as this gateway knows it: each link has its own, so a
    gateway that dropped the worker gets a new one without the others seeing a restart.
    `link_id` names the link in the events the engine thread tags; a link that forgets its
    gateway takes a new id, so the events of the requests it aborted go nowhere.

    Sends never block: the socket queues only for a gateway that is connected
    (ZMQ_IMMEDIATE), and a full queue or no gateway fails the send (False), so one dead or
    frozen gateway never stalls the loop that serves the others.
    """

    def __init__(
        self,
        context: zmq.Context[zmq.Socket[bytes]],
        config: WorkerConfig,
        endpoint: str,
        link_ids: Iterator[int],
    ) -> None:
        self.endpoint = endpoint
        self._link_ids = link_ids  # shared by a server's links: an id is never used twice
        self.link_id = next(link_ids)
        self.incarnation = uuid.uuid4().hex
        self.gateway_incarnation: str | None = None
        self.connected = False
        self.register_now = True
        self.beats = 0
        self.last_gateway_beat: float | None = None  # monotonic time of the last GatewayBeat
        self.unanswered_since: float | None = None  # dialing with no answer since then
        self.reported_unanswered = False
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, config.worker_id.encode())
        sock.setsockopt(zmq.MAXMSGSIZE, config.max_frame_bytes)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.IPV6, 1)
        if config.curve_server_key is not None:
            make_client(sock, config.curve_server_key, config.curve_secret_key)
        sock.connect(endpoint)
        self.socket = sock

    def close(self) -> None:
        self.socket.close(linger=0)

    def send(self, frame: bytes) -> bool:
        return self.send_multipart([frame])

    def send_multipart(self, frames: list[bytes]) -> bool:
        """False when the gateway cannot take it now (not connected, or its queue is full)."""
        try:
            self.socket.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def wants_register(self, register_every: int) -> bool:
        """Register goes with this beat: unconnected, asked for, or every Nth beat."""
        return not self.connected or self.register_now or self.beats % register_every == 0

    def register_waiting(self) -> bool:
        """A register not sent yet (the connection was not up), and the link not yet reported
        unanswered: worth trying again soon rather than a heartbeat later."""
        return self.register_now and not self.reported_unanswered

    def gateway_beat(self, message: GatewayBeat, now: float) -> tuple[str, bool] | None:
        """Take the gateway's answer to a heartbeat. Returns why this gateway's requests must
        be aborted (nobody will read them any more) and whether the worker must come back
        to it as a new incarnation, or None."""
        lost = None
        if self.gateway_incarnation not in (None, message.incarnation):
            # A new gateway knows nothing of the old one's requests.
            lost = (f"the gateway at {self.endpoint} restarted", False)
        elif not message.registered and self.connected and not self.register_now:
            # The same gateway dropped us (stopped, or frozen, past its heartbeat timeout)
            # and failed our requests; it must learn us as a new incarnation.
            lost = (f"the gateway at {self.endpoint} had dropped this worker", True)
        if not self.connected:
            log.info("the gateway at %s answers", self.endpoint)
        self.gateway_incarnation = message.incarnation
        self.last_gateway_beat = now
        self.connected = True
        self.unanswered_since = None
        self.reported_unanswered = False
        return lost

    def silence(self, now: float, timeout_s: float) -> str | None:
        """Why the gateway counts as gone now (it answered, then went silent past the
        timeout), or None; a gone gateway's link is dialing again from now."""
        if not self.connected or self.last_gateway_beat is None:
            return None
        silent_s = now - self.last_gateway_beat
        if silent_s <= timeout_s:
            return None
        self.connected = False
        self.unanswered_since = now
        return f"the gateway at {self.endpoint} was silent for {silent_s:.1f} s"

    def deadline(self, timeout_s: float) -> float | None:
        """When silence would drop the gateway, if it answers now."""
        if not self.connected or self.last_gateway_beat is None:
            return None
        return self.last_gateway_beat + timeout_s

    def unanswered(self, now: float, timeout_s: float) -> bool:
        """True once per streak: dialing, and no gateway answered within the timeout."""
        if self.connected or self.reported_unanswered:
            return False
        self.unanswered_since = self.unanswered_since or now
        if now - self.unanswered_since <= timeout_s:
            return False
        self.reported_unanswered = True
        return True

    def forget(self, new_incarnation: bool = False) -> None:
        """Drop this gateway's requests' routing (their events go nowhere) and register at
        once; as a new incarnation when the gateway may have dropped us."""
        self.link_id = next(self._link_ids)
        self.register_now = True
        if new_incarnation:
            self.incarnation = uuid.uuid4().hex
