"""The worker process's life: serve until a signal drains it, the health probe beside it."""

from __future__ import annotations

import gc
import logging
import signal

from common.signal_wakeup import SignalWakeup
from worker.engine.inference_engine import InferenceEngine
from worker.server.health import HealthServer
from worker.server.worker_config import WorkerConfig
from worker.server.worker_server import WorkerServer

log = logging.getLogger(__name__)


def freeze_loaded_heap() -> None:
    """Put every object loading made (the model's modules, the tokenizer, the imported
    libraries: ~435,000 on the default model) out of the garbage collector's reach.

    Why: they live as long as the process, yet each full collection walked them all, while
    the engine thread stood still: a decode step then took several times its length
    (docs/BENCHMARKS.md). Frozen, a full collection walks only what serving made since.
    No collection first: the load leaves a few unreachable cycles (20 objects on the default
    model), and collecting them took ~0.1 s of every start.
    """
    gc.freeze()


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
    freeze_loaded_heap()
    log.info("worker %s dialing %s", config.worker_id, ", ".join(config.gateways))
    wakeup = SignalWakeup()
    try:
        server.run(wakeup)
    finally:
        wakeup.close()
        engine.shutdown()
        server.close()
        if health is not None:
            health.stop()
