"""Faults with real processes: workers killed or stopped, streams cancelled, gateway restarts,
overload and graceful drains. Every stream must end; nothing may leak."""

from __future__ import annotations

import json
import random
import signal
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from bench.server import Server, WorkerProcess, http_json, wait_until

pytestmark = pytest.mark.slow
HEARTBEAT_TIMEOUT = "2"


class Cluster:
    """A gateway and workers as separate processes, all stopped at the end."""

    def __init__(self, model_dir: Path, num_workers: int, *gateway_args: str) -> None:
        self.model_dir = model_dir
        self.gateway_args = ("--heartbeat-timeout", HEARTBEAT_TIMEOUT, *gateway_args)
        self.gateway = Server("gateway", *self.gateway_args)
        self.workers = [self.start_worker(f"w{i}") for i in range(num_workers)]

    def start_worker(self, worker_id: str) -> WorkerProcess:
        return WorkerProcess(
            self.gateway.worker_bind,
            "--model",
            str(self.model_dir),
            "--dtype",
            "float32",
            "--kv-cache-mb",
            "64",
            worker_id=worker_id,
        )

    @property
    def url(self) -> str:
        return self.gateway.url

    def restart_gateway(self) -> None:
        port, bind = self.gateway.port, self.gateway.worker_bind
        self.gateway.process.kill()
        self.gateway.process.wait()
        self.gateway.stop()
        self.gateway = Server("gateway", *self.gateway_args, port=port, worker_bind=bind)

    def num_workers(self) -> int:
        status, body = http_json(f"{self.url}/health")
        return body.get("workers", 0) if status == 200 else 0

    def worker_stats(self) -> list[dict]:
        return http_json(f"{self.url}/stats")[1]["workers"]

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.gateway.stop()


@pytest.fixture
def two_workers(tiny_model_dir: Path) -> Iterator[Cluster]:
    cluster = Cluster(tiny_model_dir, 2, "--routing", "least_loaded")
    try:
        cluster.gateway.wait_ready(workers=2)
        yield cluster
    finally:
        cluster.stop()


def chat(url: str, prompt: str, max_tokens: int = 8, timeout: float = 60) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
    return httpx.post(
        f"{url}/v1/chat/completions", json={**body, "temperature": 0}, timeout=timeout
    )


def long_stream(url: str, prompt: str, max_tokens: int):
    """An open SSE response that will run for `max_tokens` tokens (EOS ignored)."""
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    return httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60)


def stream_outcome(url: str, prompt: str, started: threading.Barrier | None = None) -> str:
    """ "done" for a stream that finished, "error" for one that ended with an error event."""
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 900,
        "ignore_eos": True,
        "stream": True,
    }
    outcome = "cut"
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        for i, line in enumerate(response.iter_lines()):
            if i == 2 and started is not None:
                started.wait(timeout=30)
            if line.startswith("data: {") and '"error"' in line:
                outcome = "error"
            if line == "data: [DONE]":
                return outcome if outcome == "error" else "done"
    return outcome


def test_kill_9_of_one_worker_during_streams(two_workers: Cluster):
    started = threading.Barrier(13)
    with ThreadPoolExecutor(12) as pool:
        futures = [
            pool.submit(stream_outcome, two_workers.url, f"story {i}", started) for i in range(12)
        ]
        started.wait(timeout=60)
        two_workers.workers[0].process.kill()
        outcomes = [f.result(timeout=30) for f in futures]  # every stream ends
    assert set(outcomes) <= {"done", "error"}
    assert "error" in outcomes and "done" in outcomes  # both workers had some
    assert wait_until(lambda: two_workers.num_workers() == 1, 10)
    assert chat(two_workers.url, "after").status_code == 200
    assert wait_until(lambda: [w["kv_pages_in_use"] for w in two_workers.worker_stats()] == [0], 10)


def test_a_stopped_worker_is_dropped_and_comes_back(two_workers: Cluster):
    stopped = two_workers.workers[1]
    [before] = [w["incarnation"] for w in two_workers.worker_stats() if w["worker_id"] == "w1"]
    stopped.signal(signal.SIGSTOP)
    try:
        assert wait_until(lambda: two_workers.num_workers() == 1, 10)
        for i in range(4):  # every new request lands on the live worker
            assert chat(two_workers.url, f"while stopped {i}").status_code == 200
        assert [w["worker_id"] for w in two_workers.worker_stats()] == ["w0"]
    finally:
        stopped.signal(signal.SIGCONT)
    assert wait_until(lambda: two_workers.num_workers() == 2, 15)
    assert chat(two_workers.url, "both again").status_code == 200
    [after] = [w["incarnation"] for w in two_workers.worker_stats() if w["worker_id"] == "w1"]
    assert after != before  # it came back as a new incarnation, as the README says


def test_two_hundred_cancelled_streams_leak_nothing(two_workers: Cluster):
    rng = random.Random(7)
    cut_after = [rng.randrange(0, 12) for _ in range(200)]

    def cancelled_stream(lines: int) -> None:
        body = {
            "messages": [{"role": "user", "content": f"cancel {lines}"}],
            "max_tokens": 600,
            "ignore_eos": True,
            "stream": True,
        }
        with httpx.stream(
            "POST", f"{two_workers.url}/v1/chat/completions", json=body, timeout=60
        ) as response:
            for i, _ in enumerate(response.iter_lines()):
                if i >= lines:
                    return

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(cancelled_stream, cut_after))

    def idle() -> bool:
        workers = two_workers.worker_stats()
        return all(w["active_tasks"] == 0 and w["kv_pages_in_use"] == 0 for w in workers)

    assert wait_until(idle, 5)


def test_gateway_restart_and_workers_reconnect(tiny_model_dir: Path):
    """Also the gateway keeping vLLM's 400 for a budget past the context, when asked to."""
    cluster = Cluster(tiny_model_dir, 1, "--max-tokens-past-context", "error")
    try:
        cluster.gateway.wait_ready(workers=1)
        assert chat(cluster.url, "before").status_code == 200
        cluster.restart_gateway()
        cluster.gateway.wait_ready(workers=1, timeout_s=30)
        assert chat(cluster.url, "after").status_code == 200
        refused = chat(cluster.url, "after", max_tokens=100000)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "context_length_exceeded"
        assert refused.json()["error"]["param"] == "max_tokens"
    finally:
        cluster.stop()


def test_overload_is_429_or_529_with_retry_after_and_never_5xx(tiny_model_dir: Path):
    cluster = Cluster(
        tiny_model_dir, 1, "--max-in-flight", "2", "--max-queued", "1", "--queue-timeout", "1"
    )
    try:
        cluster.gateway.wait_ready(workers=1)
        with ThreadPoolExecutor(12) as pool:
            replies = list(pool.map(lambda i: chat(cluster.url, f"load {i}", 300), range(12)))
        statuses = sorted(r.status_code for r in replies)
        assert 200 in statuses and 429 in statuses and max(statuses) < 500
        refused = next(r for r in replies if r.status_code == 429)
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["type"] == "rate_limit_error"
        body = {
            "model": "tiny-llama",
            "max_tokens": 300,
            "messages": [{"role": "user", "content": "x"}],
        }
        with ThreadPoolExecutor(8) as pool:
            replies = list(
                pool.map(
                    lambda _: httpx.post(f"{cluster.url}/v1/messages", json=body, timeout=60),
                    range(8),
                )
            )
        anthropic_refused = [r for r in replies if r.status_code != 200]
        assert anthropic_refused and {r.status_code for r in anthropic_refused} == {529}
        assert anthropic_refused[0].json()["error"]["type"] == "overloaded_error"
    finally:
        cluster.stop()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (fails on the timeout)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_slow_heads_and_bodies_hold_no_admission_slot_and_get_408(tiny_model_dir: Path):
    cluster = Cluster(
        tiny_model_dir,
        1,
        "--max-in-flight",
        "1",
        "--max-queued",
        "0",
        "--body-timeout",
        "2",
        "--header-timeout",
        "2",
    )
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    try:
        cluster.gateway.wait_ready(workers=1)
        address = ("127.0.0.1", cluster.gateway.port)
        slow = [socket.create_connection(address, 20) for _ in range(5)]
        try:
            for sock in slow[:3]:
                sock.sendall(head)  # then nothing more: 99 body bytes never come
            slow[3].sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHo")  # half a head
            # (slow[4] sends nothing at all.)
            # The one admission slot is free for a client that sends its body.
            assert chat(cluster.url, "fast").status_code == 200
            for sock in slow[:3]:
                reply = read_until_closed(sock)
                assert reply.startswith(b"HTTP/1.1 408 ")
                assert b"the request body took longer than 2 s to arrive" in reply
            for sock in slow[3:]:
                reply = read_until_closed(sock)
                assert reply.startswith(b"HTTP/1.1 408 ")
                assert b"the request head (request line and headers) took too long" in reply
        finally:
            for sock in slow:
                sock.close()
        metrics = httpx.get(f"{cluster.url}/metrics").text
        assert 'astrai_requests_total{protocol="openai",status="408"} 3.0' in metrics
        assert 'astrai_requests_total{protocol="http",status="408"} 2.0' in metrics
        assert http_json(f"{cluster.url}/stats")[1]["gateway"]["in_flight"] == 0
    finally:
        cluster.stop()


def test_sigterm_on_the_gateway_drains_in_flight_streams(tiny_model_dir: Path):
    cluster = Cluster(tiny_model_dir, 1, "--drain-timeout", "20")
    try:
        cluster.gateway.wait_ready(workers=1)
        with long_stream(cluster.url, "long", 400) as response:
            lines = response.iter_lines()
            next(lines)
            cluster.gateway.process.send_signal(signal.SIGTERM)
            assert wait_until(lambda: http_json(f"{cluster.url}/health")[0] == 503, 5)
            refused = chat(cluster.url, "too late")
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "5"
            rest = [line for line in lines if line]
        chunks = [json.loads(line[6:]) for line in rest if line.startswith("data: {")]
        assert rest[-1] == "data: [DONE]"
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert cluster.gateway.process.wait(30) == 0
    finally:
        cluster.stop()


def test_streams_that_outlast_the_drain_end_with_an_error_event(tiny_model_dir: Path):
    # A long heartbeat timeout: the stopped worker must not be dropped before the drain ends.
    cluster = Cluster(tiny_model_dir, 1, "--drain-timeout", "1", "--heartbeat-timeout", "60")
    try:
        cluster.gateway.wait_ready(workers=1)
        worker = cluster.workers[0]
        with long_stream(cluster.url, "cut me", 900) as response:
            lines = response.iter_lines()
            next(lines)
            worker.signal(signal.SIGSTOP)  # the stream cannot finish within the drain
            try:
                cluster.gateway.process.send_signal(signal.SIGTERM)
                rest = [line for line in lines if line]
            finally:
                worker.signal(signal.SIGCONT)
        assert rest[-1] == "data: [DONE]"
        error = json.loads(rest[-2][6:])["error"]
        assert error["message"] == "the server is shutting down"
        assert error["type"] == "server_error"
        assert cluster.gateway.process.wait(30) == 0
    finally:
        cluster.stop()


def test_sigterm_on_a_worker_drains_it(tiny_model_dir: Path):
    # A request finding no live worker waits for one until its queue timeout, then gets 503.
    cluster = Cluster(tiny_model_dir, 1, "--queue-timeout", "2")
    try:
        cluster.gateway.wait_ready(workers=1)
        worker = cluster.workers[0]
        with long_stream(cluster.url, "finish me", 900) as response:
            lines = response.iter_lines()
            next(lines)
            worker.signal(signal.SIGTERM)
            assert wait_until(lambda: cluster.worker_stats()[0]["draining"], 5)
            assert cluster.num_workers() == 0  # draining: takes nothing new
            refused = chat(cluster.url, "too late")
            assert refused.status_code == 503
            rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]"
        last = json.loads(rest[-2][6:])
        assert last["choices"][0]["finish_reason"] == "length"
        assert worker.process.wait(30) == 0
    finally:
        cluster.stop()
