"""A worker's step of events in one multipart message reaches every client, in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import zmq

from bench.server import Server, wait_until
from common.schemas import Accepted, Finished, Heartbeat, Register, Submit, Tokens
from common.token_output import FinishReason
from common.wire import MAX_FRAMES_PER_MESSAGE, decode, encode

pytestmark = pytest.mark.slow
MODEL = "scripted"


class ScriptedWorker:
    """A DEALER that registers like a worker and answers Submits as a test scripts it."""

    def __init__(self, address: str) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.IDENTITY, b"scripted-1")
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)
        self.socket.send(encode(Register("scripted-1", "i1", MODEL, 4096, 8, 64, 16, 1, "h")))
        self.beat()

    def beat(self) -> None:
        self.socket.send(encode(Heartbeat("scripted-1", "i1", 0, 0, 64, 64, 0)))

    def next_submit(self, timeout_s: float = 10.0) -> Submit:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.socket.poll(100):
                message = decode(self.socket.recv())
                if isinstance(message, Submit):
                    return message
            else:
                self.beat()
        raise TimeoutError("no Submit arrived")

    def close(self) -> None:
        self.socket.close()
        self.context.term()


@pytest.fixture
def gateway() -> Iterator[tuple[Server, ScriptedWorker]]:
    server = Server("gateway").wait_ready(workers=0)
    worker = ScriptedWorker(server.worker_bind)
    try:
        assert wait_until(lambda: server.stats()["workers"] != [], 10)
        yield server, worker
    finally:
        worker.close()
        server.stop()


class StreamingClient:
    """One streamed chat request on a thread of its own; `body` once it has ended."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.body = ""
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
        with httpx.stream("POST", f"{self.url}/v1/chat/completions", json=body, timeout=30) as r:
            self.body = r.read().decode()

    def wait(self) -> str:
        self.thread.join(30)
        return self.body


def accept_next(worker: ScriptedWorker) -> str:
    """The request id of the next Submit, accepted."""
    request_id = worker.next_submit().request_id
    worker.socket.send(encode(Accepted(request_id, 1)))
    return request_id


def finished(request_id: str) -> bytes:
    return encode(Finished(request_id, 0, FinishReason.STOP, 1, 3, 0))


def test_tokens_of_one_step_arrive_together_and_in_order(gateway):
    server, worker = gateway
    client = StreamingClient(server.url)
    rid = accept_next(worker)
    parts = [encode(Tokens(rid, 0, text, [i])) for i, text in enumerate(["al", "pha", "!"])]
    worker.socket.send_multipart([*parts, finished(rid)])
    body = client.wait()
    assert body.index('"al"') < body.index('"pha"') < body.index('"!"')
    assert '"finish_reason":"stop"' in body.replace(" ", "") and body.rstrip().endswith("[DONE]")


def test_a_message_with_too_many_parts_is_dropped_whole(gateway):
    server, worker = gateway
    client = StreamingClient(server.url)
    rid = accept_next(worker)
    too_many = [encode(Tokens(rid, 0, "x", [1]))] * (MAX_FRAMES_PER_MESSAGE + 1)
    worker.socket.send_multipart(too_many)
    worker.socket.send_multipart([encode(Tokens(rid, 0, "ok", [2])), finished(rid)])
    body = client.wait()
    assert '"x"' not in body and '"ok"' in body
    assert server.stats()["dropped_frames"].get("framing") == 1
