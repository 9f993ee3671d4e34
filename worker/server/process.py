"""The worker process's life: serve until a signal drains it, the health probe beside it."""

from __future__ import annotations

import logging
import signal

from worker.engine.inference_engine import InferenceEngine
from worker.server.health import HealthServer
from worker.server.worker_config import WorkerConfig
from worker.server.worker_server import WorkerServer

log = logging.getLogger(__name__)


def serve_worker(
    engine: InferenceEngine, config: WorkerConfig, health_port: int | None = None
) -> None:
    """Run until drained (first SIGTERM/SIGINT) or stopped (the second one)."""
    server = WorkerServer(engine, config)
    health = None
    if health_port is not None:
        # Probes come from the orchestrator over the pod network, so all interfaces; the
        # port exists only when asked for, and it only reveals liveness.
        health = HealthServer("0.0.0.0", health_port, server.is_live, server.is_ready)
        health.start()

    def on_signal(*_: object) -> None:
        if server.draining:
            server.stop()
        else:
            log.info("draining: no new requests, finishing the running ones")
            server.drain()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    log.info("worker %s dialing %s", config.worker_id, config.gateway)
    try:
        server.run()
    finally:
        engine.shutdown()
        server.close()
        if health is not None:
            health.stop()
