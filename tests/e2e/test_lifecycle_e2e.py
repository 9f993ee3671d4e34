"""Client disconnects free the worker's pages; `astrai serve` leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import TINY_NAME
from tests.e2e.harness import Server, wait_until

pytestmark = pytest.mark.slow  # real processes (`astrai serve` and more)

# Sampled, not greedy: the random model's greedy text repeats itself, so drafted tokens come
# several a step and a whole reply can end before a client's disconnect reaches the worker.
LONG = {"max_tokens": 400, "temperature": 1.0, "seed": 1, "ignore_eos": True, "stream": True}


def pages_and_tasks(server: Server) -> tuple[int, int]:
    [worker] = server.stats()["workers"]
    return worker["kv_pages_in_use"], worker["active_tasks"]


def generated(server: Server) -> int:
    return server.stats()["total_tokens"]


def test_stream_disconnect_frees_pages(tiny_server: Server):
    body = {"messages": [{"role": "user", "content": "Go on."}], **LONG, "max_tokens": 900}
    before = generated(tiny_server)
    orphans = tiny_server.stats()["dropped_frames"].get("orphan", 0)
    with httpx.stream(
        "POST", f"{tiny_server.url}/v1/chat/completions", json=body, timeout=60
    ) as response:
        lines = response.iter_lines()
        for _ in range(4):
            next(lines)
        assert wait_until(lambda: pages_and_tasks(tiny_server)[0] > 0, 10)
    # The client closed the connection mid-stream.
    assert wait_until(lambda: pages_and_tasks(tiny_server) == (0, 0), 15)
    # Aborted, not run to its end (EOS is ignored: only an abort ends it early).
    assert generated(tiny_server) - before < 900
    # The worker's last word on the aborted request is expected, not a dropped frame.
    time.sleep(0.5)
    assert tiny_server.stats()["dropped_frames"].get("orphan", 0) == orphans


def test_anthropic_stream_disconnect_frees_pages(tiny_server: Server):
    body = {"model": TINY_NAME, "messages": [{"role": "user", "content": "Go."}], **LONG}
    body["max_tokens"] = 900
    before = generated(tiny_server)
    with httpx.stream("POST", f"{tiny_server.url}/v1/messages", json=body, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)
    assert wait_until(lambda: pages_and_tasks(tiny_server) == (0, 0), 15)
    assert generated(tiny_server) - before < 900


def test_non_stream_disconnect_frees_pages(tiny_server: Server):
    # 960 tokens: the longest reply the tiny model's 1,024 positions leave room for.
    body = {"messages": [{"role": "user", "content": "Go."}], **LONG, "stream": False}
    body["max_tokens"] = 960
    tokens_before = tiny_server.stats()["total_tokens"]
    payload = json.dumps(body).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    # The client closes the connection while its request runs, before any response: not
    # after a client timeout, which a fast enough CPU outran (the whole reply came first).
    with socket.create_connection(("127.0.0.1", tiny_server.port), timeout=10) as client:
        client.sendall(head.encode() + payload)
        assert wait_until(lambda: pages_and_tasks(tiny_server)[1] > 0, 10)
    assert wait_until(lambda: pages_and_tasks(tiny_server) == (0, 0), 15)
    # Aborted, not run to its end: fewer than its 960 tokens were generated.
    assert wait_until(lambda: tiny_server.stats()["total_tokens"] > tokens_before, 5)
    assert tiny_server.stats()["total_tokens"] - tokens_before < 960


def test_sigterm_stops_every_child(tiny_model_dir: Path):
    server = Server("serve", "--model", str(tiny_model_dir), "--dtype", "float32", workers=2)
    try:
        server.wait_ready()
        assert server.stats()["num_workers"] == 2
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
        assert wait_until(lambda: not server.group_alive(), 15)
    finally:
        server.stop()


def test_sigterm_on_serve_gives_streams_the_drain_then_an_error_event(tiny_model_dir: Path):
    server = Server(
        "serve", "--model", str(tiny_model_dir), "--dtype", "float32", "--drain-timeout", "1"
    )
    try:
        server.wait_ready()
        [worker] = server.stats()["workers"]
        body = {"messages": [{"role": "user", "content": "Go on."}], **LONG, "max_tokens": 900}
        with httpx.stream(
            "POST", f"{server.url}/v1/chat/completions", json=body, timeout=60
        ) as response:
            lines = response.iter_lines()
            next(lines)
            os.kill(worker["pid"], signal.SIGSTOP)  # the stream cannot finish within the drain
            try:
                server.process.send_signal(signal.SIGTERM)
                rest = [line for line in lines if line]
            finally:
                os.kill(worker["pid"], signal.SIGCONT)
        # Not cut off: the stream ended in the protocol's own way.
        assert rest[-1] == "data: [DONE]"
        assert json.loads(rest[-2][6:])["error"]["message"] == "the server is shutting down"
        assert server.process.wait(30) == 0
        assert wait_until(lambda: not server.group_alive(), 15)
    finally:
        server.stop()


def test_sigkill_of_serve_takes_its_children_down(tiny_model_dir: Path):
    server = Server("serve", "--model", str(tiny_model_dir), "--dtype", "float32")
    try:
        server.wait_ready()
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(10)
        assert wait_until(lambda: not server.group_alive(), 20)
    finally:
        server.stop()


def test_serve_restarts_a_crashed_worker(tiny_model_dir: Path):
    server = Server("serve", "--model", str(tiny_model_dir), "--dtype", "float32")
    try:
        server.wait_ready()
        [worker] = server.stats()["workers"]
        os.kill(worker["pid"], signal.SIGKILL)
        assert wait_until(
            lambda: [w["pid"] for w in server.stats()["workers"]] not in ([], [worker["pid"]]),
            60,
        )
        [again] = server.stats()["workers"]
        assert again["worker_id"] == worker["worker_id"]
        assert again["incarnation"] != worker["incarnation"]
    finally:
        server.stop()
