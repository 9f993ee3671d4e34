"""The gateway in this process: its Starlette app (with its lifespan) and scripted workers on
a loopback ZeroMQ socket, an httpx client on the ASGI app, and an ASGI caller that leaves."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from common.ports import free_loopback_port
from gateway.app import Gateway
from gateway.config import GatewayConfig
from tests.gateway.scripted_worker import Script, ScriptedWorker

HEARTBEAT_TIMEOUT_S = 1.0  # the workers beat every 0.05 s; only a silent one misses this


@dataclass
class InProcess:
    gateway: Gateway
    app: Any  # the Starlette app, for calls made by hand
    workers: list[ScriptedWorker]
    client: httpx.AsyncClient

    @property
    def worker(self) -> ScriptedWorker:
        return self.workers[0]

    def counted(self, protocol: str, status: int) -> int:
        return self.gateway.metrics.requests[(protocol, status)]

    async def assert_all_released(self) -> None:
        """No admission slot, channel or worker in-flight entry is left behind."""
        gateway = self.gateway
        await until(lambda: gateway.admission.in_flight == 0 and gateway.hub.num_open == 0)
        assert all(not w.in_flight for w in gateway.registry.all())


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait, bounded, for `condition` (polled while the loop runs the gateway)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s} s")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def in_process(
    *scripts: Script,
    falls_silent: bool | Sequence[bool] = False,
    aliases: tuple[str, ...] = (),
    **settings: Any,
) -> AsyncIterator[InProcess]:
    """A gateway on a free loopback port with one scripted worker per script, registered;
    `falls_silent` for all of them, or per worker; every worker serves `aliases` too;
    `settings`: more GatewayConfig fields."""
    silent = [falls_silent] * len(scripts) if isinstance(falls_silent, bool) else falls_silent
    bind = f"tcp://127.0.0.1:{free_loopback_port()}"
    config = GatewayConfig(worker_bind=bind, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, **settings)
    gateway = Gateway(config)
    app = gateway.app()
    async with app.router.lifespan_context(app):
        workers = [
            ScriptedWorker(bind, script, f"scripted-{i}", falls_silent=silent[i], aliases=aliases)
            for i, script in enumerate(scripts)
        ]
        try:
            for worker in workers:
                worker.start()
            await until(lambda: len(gateway.registry.live()) == len(workers))
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
                yield InProcess(gateway, app, workers, client)
        finally:
            for worker in workers:
                worker.stop()


async def call_and_leave(
    app: Any, path: str, body: dict[str, Any], leave_when: Callable[[list[bytes]], bool]
) -> list[dict[str, Any]]:
    """POST `body` to the ASGI app as a client that closes its connection once
    `leave_when(body chunks received so far)` holds; the ASGI messages the app sent.

    httpx's ASGI transport and Starlette's TestClient only report a disconnect once the
    response is complete, so a client that leaves midway is played here, by hand.
    """
    sent: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    body_read = False

    async def receive() -> dict[str, Any]:
        nonlocal body_read
        if not body_read:
            body_read = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        await until(lambda: leave_when(chunks))
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            chunks.append(message["body"])

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},  # 2.3: the app listens for leaving
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"gateway"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 40000),
        "server": ("gateway", 80),
    }
    await asyncio.wait_for(app(scope, receive, send), 10)
    return sent


def sse_data(text: str) -> list[Any]:
    """The JSON payloads of a stream's `data:` lines, `[DONE]` as the string."""
    payloads: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads
