"""A gateway without HTTP for in-process WorkerServer tests: a real ZeroMQ ROUTER on loopback
that reads the worker's messages, answers its heartbeats as a gateway does, and sends what a
test scripts (the mirror image of tests/gateway/scripted_worker.py). Every wait is bounded."""

from __future__ import annotations

import time
from collections.abc import Callable

import zmq

from common.schemas import GatewayBeat, Heartbeat, Message
from common.wire import decode, encode

Kind = type[Message]


class ScriptedGateway:
    """Used from the test's thread only: heartbeats are answered when the test reads.

    Bound to `address`, or to a free loopback port. `beat_incarnation`: the GatewayBeat each
    Heartbeat gets (None: silence); `registered` what it says about the worker. `close`
    closes the socket and its context.
    """

    def __init__(self, address: str | None = None) -> None:
        self._context = zmq.Context()
        self.router = self._context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        if address is None:
            port = self.router.bind_to_random_port("tcp://127.0.0.1")
            address = f"tcp://127.0.0.1:{port}"
        else:
            self.router.bind(address)
        self.address = address
        self.beat_incarnation: str | None = None
        self.registered = True
        self.identity: bytes | None = None  # the worker's, once it has said something
        self._pending: list[Message] = []  # received, not yet read by the test

    def close(self) -> None:
        self.router.close()
        self._context.term()

    def receive(self, timeout_s: float = 2.0) -> Message:
        """The worker's next message (each part of a multipart is one)."""
        deadline = time.monotonic() + timeout_s
        while not self._pending:
            if not self._fill(deadline - time.monotonic()):
                raise TimeoutError(f"the worker said nothing for {timeout_s} s")
        return self._pending.pop(0)

    def expect(self, kind: Kind, timeout_s: float = 2.0, skip: tuple[Kind, ...] = ()) -> Message:
        """The next message that is not one of `skip`; it must be a `kind`."""
        deadline = time.monotonic() + timeout_s
        while True:
            message = self.receive(deadline - time.monotonic())
            if not isinstance(message, skip):
                assert isinstance(message, kind), f"expected {kind.__name__}, got {message}"
                return message

    def wait_until(self, condition: Callable[[], bool], timeout_s: float = 2.0) -> None:
        """Read (and answer) what comes while waiting for `condition`."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"not true within {timeout_s} s"
            self._fill(0.01)

    def send(self, message: Message) -> None:
        self.send_raw(encode(message))

    def send_raw(self, frame: bytes) -> None:
        assert self.identity is not None, "the worker has not dialed in yet"
        self.router.send_multipart([self.identity, frame])

    def _fill(self, timeout_s: float) -> bool:
        if not self.router.poll(max(0, int(timeout_s * 1000))):
            return False
        self.identity, *parts = self.router.recv_multipart()
        for part in parts:
            message = decode(part)
            self._pending.append(message)
            if isinstance(message, Heartbeat) and self.beat_incarnation is not None:
                self.send(GatewayBeat(self.beat_incarnation, self.registered))
        return True


def wait_all(
    gateways: list[ScriptedGateway], condition: Callable[[], bool], timeout_s: float = 2.0
) -> None:
    """Read (and answer) what comes to every one of `gateways` while waiting for
    `condition`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not true within {timeout_s} s"
        for gateway in gateways:
            gateway._fill(0.005)
