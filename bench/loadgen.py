"""Load generator: streams chat requests at a server and times each token (any OpenAI server)."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bench.sse_client import HTTPStreamError, StreamingPost

PROTOCOLS = ("openai", "anthropic")


@dataclass
class RequestRecord:
    """What one request did, in seconds from its own start."""

    ok: bool
    start: float  # since the run began
    ttft: float | None = None
    latency: float | None = None
    token_times: list[float] = field(default_factory=list)  # arrival of each text delta
    output_tokens: int = 0
    error: str | None = None

    @property
    def itls(self) -> list[float]:
        times = self.token_times
        return [b - a for a, b in itertools.pairwise(times)]


@dataclass(frozen=True)
class LoadSpec:
    url: str
    protocol: str = "openai"
    model: str | None = None
    max_tokens: int = 128
    ignore_eos: bool = False
    temperature: float = 0.0
    api_key: str | None = None
    timeout_s: float = 600.0
    extra_body: Mapping[str, Any] | None = None  # more fields for every body (OpenAI)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")


def request_body(spec: LoadSpec, messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) for one streamed chat request in the spec's protocol."""
    if spec.protocol == "anthropic":
        system = [m["content"] for m in messages if m["role"] == "system"]
        body: dict[str, Any] = {
            "model": spec.model or "default",
            "max_tokens": spec.max_tokens,
            "messages": [m for m in messages if m["role"] != "system"],
            "temperature": spec.temperature,
            "stream": True,
        }
        if system:
            body["system"] = "\n".join(system)
        return "/v1/messages", body
    body = {
        "messages": messages,
        "max_tokens": spec.max_tokens,
        "temperature": spec.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if spec.model:
        body["model"] = spec.model
    if spec.ignore_eos:
        body["ignore_eos"] = True
        body["min_tokens"] = spec.max_tokens  # servers without ignore_eos still honour this
    body.update(spec.extra_body or {})
    return "/v1/chat/completions", body


def _text_and_usage(protocol: str, event: dict[str, Any]) -> tuple[str, int | None]:
    """The text delta in one SSE payload and, when it carries one, the output token count."""
    if protocol == "anthropic":
        if event.get("type") == "content_block_delta":
            return event.get("delta", {}).get("text", ""), None
        if event.get("type") == "message_delta":
            return "", event.get("usage", {}).get("output_tokens")
        if event.get("type") == "error":
            raise RuntimeError(event.get("error", {}).get("message", "stream error"))
        return "", None
    if "error" in event:
        raise RuntimeError(event["error"].get("message", "stream error"))
    usage = event.get("usage") or {}
    text = "".join((c.get("delta") or {}).get("content") or "" for c in event.get("choices", []))
    return text, usage.get("completion_tokens")


async def run_one(spec: LoadSpec, messages: list[dict[str, Any]], t0: float) -> RequestRecord:
    """One streamed request on a fresh connection (a kept-alive one races the server closing
    it: llama.cpp's server did, failing 2 of 32 sequential requests)."""
    started = time.perf_counter()
    record = RequestRecord(ok=False, start=started - t0)
    try:
        await asyncio.wait_for(_stream_into(record, spec, messages, started), spec.timeout_s)
    except asyncio.TimeoutError:
        record.error = f"timed out after {spec.timeout_s:g} s"
    except (OSError, HTTPStreamError, asyncio.IncompleteReadError, ValueError, RuntimeError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"  # JSONDecodeError is a ValueError
    return record


async def _stream_into(
    record: RequestRecord, spec: LoadSpec, messages: list[dict[str, Any]], started: float
) -> None:
    path, body = request_body(spec, messages)
    headers = {"authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    deltas = 0
    async with StreamingPost(spec.url, path, body, headers) as response:
        if response.status != 200:
            text = (await response.read()).decode(errors="replace")
            record.error = f"HTTP {response.status}: {text[:200]}"
            return
        async for line in response.lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            text, tokens = _text_and_usage(spec.protocol, json.loads(line[6:]))
            now = time.perf_counter() - started
            if text:
                deltas += 1
                record.token_times.append(now)
                if record.ttft is None:
                    record.ttft = now
            if tokens is not None:
                record.output_tokens = tokens
    record.latency = time.perf_counter() - started
    record.output_tokens = record.output_tokens or deltas
    record.ok = record.ttft is not None
    if not record.ok:
        record.error = "no tokens"


async def run_load(
    spec: LoadSpec,
    conversations: Sequence[list[dict[str, Any]]],
    concurrency: int | None = None,
    rate: float | None = None,
    seed: int = 0,
    on_done: Callable[[RequestRecord], None] | None = None,
    max_tokens_each: Sequence[int] | None = None,
) -> tuple[list[RequestRecord], float]:
    """Closed loop at `concurrency`, or Poisson arrivals at `rate` req/s. (records, wall s).

    `max_tokens_each`, one per conversation, overrides the spec's output budget per request.
    """
    budgets = list(max_tokens_each or [spec.max_tokens] * len(conversations))
    if len(budgets) != len(conversations):
        raise ValueError("max_tokens_each needs one budget per conversation")
    if (concurrency is None) == (rate is None):
        raise ValueError("give exactly one of concurrency or rate")
    t0 = time.perf_counter()
    records: list[RequestRecord] = []

    async def one(item: tuple[list[dict[str, Any]], int]) -> None:
        messages, budget = item
        record = await run_one(replace(spec, max_tokens=budget), messages, t0)
        records.append(record)
        if on_done is not None:
            on_done(record)

    items = list(zip(conversations, budgets, strict=True))
    if concurrency is not None:
        queue: asyncio.Queue[tuple[list[dict[str, Any]], int]] = asyncio.Queue()
        for item in items:
            queue.put_nowait(item)

        async def worker() -> None:
            while not queue.empty():
                await one(queue.get_nowait())

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(items)))))
    else:
        assert rate is not None
        rng = random.Random(seed)
        tasks = []
        for item in items:
            tasks.append(asyncio.create_task(one(item)))
            await asyncio.sleep(rng.expovariate(rate))
        await asyncio.gather(*tasks)
    return records, time.perf_counter() - t0


def drive_load(
    spec: LoadSpec, conversations: Sequence[list[dict[str, Any]]], **kwargs: Any
) -> tuple[list[RequestRecord], float]:
    """`run_load` to completion on uvloop where installed: the client's CPU per streamed
    token is taken from the server being measured on a small machine."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run_load(spec, conversations, **kwargs))
    return uvloop.run(run_load(spec, conversations, **kwargs))
