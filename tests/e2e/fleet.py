"""Several-gateways test helpers: streams on threads, and what /stats says of the workers."""

from __future__ import annotations

import json
import threading
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from worker.server.worker_config import WorkerConfig

# How long a worker waits for a silent gateway before it drops it and its requests.
GATEWAY_TIMEOUT_S: float = WorkerConfig.__dataclass_fields__["gateway_timeout_s"].default
HEARTBEAT_S: float = WorkerConfig.__dataclass_fields__["heartbeat_s"].default


def stream_lines(url: str, content: str, max_tokens: int, timeout_s: float = 120) -> list[str]:
    """The SSE lines of one streamed chat completion, `ignore_eos` so it runs `max_tokens`."""
    body = {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return [line.decode().strip() for line in response if line.strip()]


def finished_whole(lines: list[str]) -> bool:
    """The stream ended with its last chunk's finish_reason `length`, then [DONE]."""
    if len(lines) < 2 or lines[-1] != "data: [DONE]":
        return False
    last = json.loads(lines[-2].removeprefix("data: "))
    return bool(last["choices"]) and last["choices"][0]["finish_reason"] == "length"


@dataclass
class Streams:
    """`count` streams through one gateway at once, each on its own thread; `outcomes` holds
    each one's lines, or the exception it ended with."""

    url: str
    count: int
    max_tokens: int
    outcomes: list[list[str] | BaseException] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Streams:
        lock = threading.Lock()

        def one(i: int) -> None:
            outcome: list[str] | BaseException
            try:
                outcome = stream_lines(
                    self.url, f"stream {i} of {self.url}: tell me a story", self.max_tokens
                )
            except BaseException as error:  # a cut stream is an outcome here
                outcome = error
            with lock:
                self.outcomes.append(outcome)

        self.threads = [
            threading.Thread(target=one, args=(i,), daemon=True) for i in range(self.count)
        ]
        for thread in self.threads:
            thread.start()
        return self

    def join(self, timeout_s: float = 120) -> Streams:
        for thread in self.threads:
            thread.join(timeout_s)
        assert not any(thread.is_alive() for thread in self.threads), "a stream hung"
        return self

    def num_whole(self) -> int:
        return sum(isinstance(o, list) and finished_whole(o) for o in self.outcomes)

    def all_whole(self) -> bool:
        return len(self.outcomes) == self.count == self.num_whole()


def run_streams(argv: list[str]) -> None:
    """`python -c` entry for a client on another host, argv URL COUNT MAX_TOKENS OUT: the
    streams, then how many ended whole, as JSON in the file OUT."""
    url, count, max_tokens, out = argv
    streams = Streams(url, int(count), int(max_tokens)).start().join()
    with open(out, "w") as file:
        json.dump({"count": len(streams.outcomes), "whole": streams.num_whole()}, file)


def worker_figures(stats: dict[str, Any], key: str) -> dict[str, Any]:
    """One figure of each worker a gateway's /stats lists, by worker id."""
    return {worker["worker_id"]: worker.get(key) for worker in stats.get("workers", [])}


def num_queued(stats: dict[str, Any]) -> int:
    """Choices the workers run or have waiting, as their last heartbeats said."""
    workers = stats.get("workers", [])
    return sum(w.get("active_tasks", 0) + w.get("waiting_queue", 0) for w in workers)


def only_its_own_run(stats: dict[str, Any]) -> bool:
    """Every request the workers run or queue is one of this gateway's open ones: no other
    gateway's request is left on them (each of this gateway's requests has one choice)."""
    return bool(stats.get("workers")) and num_queued(stats) <= stats.get("open_requests", 0)


def pages_free(stats: dict[str, Any]) -> bool:
    """No worker holds a KV page for a request, nor runs one."""
    workers = stats.get("workers", [])
    busy = [(w.get("kv_pages_in_use"), w.get("active_tasks")) for w in workers]
    return bool(workers) and set(busy) == {(0, 0)}
