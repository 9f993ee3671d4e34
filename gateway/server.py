"""Running the gateway: uvicorn with a drain on the first SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import time
from types import FrameType

import uvicorn

from gateway.access_log import quiet_health_polls
from gateway.app import Gateway
from gateway.config import GatewayConfig
from gateway.header_timeout import head_deadline_protocol

log = logging.getLogger(__name__)
# After the drain timeout, how long the cut responses get to write their error event and close.
CUT_FLUSH_S = 3.0


class DrainingServer(uvicorn.Server):
    """uvicorn, but the first SIGTERM/SIGINT drains before it exits.

    Readiness fails and new requests get 503 at once; in-flight requests get up to
    `drain_timeout_s` to finish; those still running then are aborted on their workers and
    their responses end with the protocol's error; then the server stops (exit 0). A second
    signal stops now.
    """

    def __init__(self, config: uvicorn.Config, gateway: Gateway) -> None:
        super().__init__(config)
        self.gateway = gateway
        self._drain_task: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain_task is not None or self.gateway.draining:
            super().handle_exit(sig, frame)
            return
        log.info("draining for up to %.0f s", self.gateway.config.drain_timeout_s)
        self.gateway.begin_drain()
        self._drain_task = asyncio.get_event_loop().create_task(self._drain())

    async def _drain(self) -> None:
        gateway = self.gateway
        await self._wait_idle(gateway.config.drain_timeout_s)
        if gateway.busy:
            cut = await gateway.hub.cut_all("the server is shutting down")
            log.warning("drain timeout: %d unfinished request(s) ended with an error", cut)
            await self._wait_idle(CUT_FLUSH_S)
        self.should_exit = True

    async def _wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.gateway.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


def run_gateway(config: GatewayConfig, log_level: str = "info") -> None:
    gateway = Gateway(config)
    # A head that times out never reaches a route: counted as the "http" protocol's 408.
    protocol = head_deadline_protocol(
        config.header_timeout_s, lambda: gateway.metrics.requests.update([("http", 408)])
    )
    server_config = uvicorn.Config(
        gateway.app(),
        host=config.host,
        port=config.port,
        log_level=log_level,
        timeout_graceful_shutdown=5,
        http=protocol,
    )
    quiet_health_polls()  # after uvicorn.Config, which configures its loggers
    DrainingServer(server_config, gateway).run()
