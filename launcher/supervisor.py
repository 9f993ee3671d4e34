"""`astrai serve`: start a gateway and each preloaded model's local workers, wait for them,
load and unload models as the gateway asks, stop them all together."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import zmq

from common.cli_options import to_argv
from common.model_control import Catalog, CatalogModel
from common.signal_wakeup import SignalWakeup
from gateway.config import GatewayConfig
from launcher.model_control_server import ModelControlServer
from launcher.model_workers import ChildCommand, ModelWorkers
from worker.engine.options import EngineOptions
from worker.server.process_options import WorkerProcessOptions
from worker.server.worker_config import WorkerConfig

PR_SET_PDEATHSIG = 1
# Beyond its drain timeout, what a stopping gateway may take (cut streams flushed, uvicorn's
# own graceful shutdown) before it is killed; and what a worker may take once its gateway is
# gone and it has nothing left to run.
GATEWAY_EXIT_GRACE_S = 10.0
WORKER_EXIT_GRACE_S = 10.0
LOOP_NAP_S = 0.2


@dataclass(frozen=True)
class ModelPlan:
    """One model of the catalog and the commands of its workers."""

    entry: CatalogModel
    commands: tuple[ChildCommand, ...]


@dataclass(frozen=True)
class ServePlan:
    """Everything `astrai serve` runs, built and checked before anything starts."""

    gateway: GatewayConfig
    models: tuple[ModelPlan, ...]
    startup_timeout_s: float
    budget_mb: int

    @property
    def workers(self) -> tuple[ChildCommand, ...]:
        """Every worker command, model by model."""
        return tuple(command for model in self.models for command in model.commands)

    def catalog(self) -> Catalog:
        entries = tuple(model.entry for model in self.models)
        return Catalog(entries, self.budget_mb, self.startup_timeout_s)


def gateway_command(gateway: GatewayConfig, log_level: str) -> ChildCommand:
    return ChildCommand("gateway", ("--log-level", log_level, *to_argv(gateway)))


def worker_commands(
    num_workers: int,
    gateway: GatewayConfig,
    engine: EngineOptions,
    process: WorkerProcessOptions,
    log_level: str,
    id_prefix: str = "worker",
) -> tuple[ChildCommand, ...]:
    """Worker i: `<id_prefix>-i`, its share of the cores and, with `--device cuda`, `cuda:i`."""
    threads = max(1, (os.cpu_count() or 1) // num_workers)  # no oversubscription
    commands = []
    for i in range(num_workers):
        device = f"cuda:{i}" if engine.device == "cuda" and num_workers > 1 else engine.device
        link = WorkerConfig(
            gateways=(gateway.worker_bind,),
            worker_id=f"{id_prefix}-{i}",
            curve_server_key=gateway.curve_secret_key,  # its public half is in the same file
        )
        options = dataclasses.replace(engine, device=device, num_threads=threads)
        argv = [*to_argv(link), *to_argv(options), *to_argv(process)]
        commands.append(ChildCommand("worker", ("--log-level", log_level, *argv)))
    return tuple(commands)


def ready_message(gateway: GatewayConfig, num_workers: int, num_models: int = 1) -> str:
    """The line `astrai serve` prints once every preloaded worker counts, and the URLs."""
    url = f"http://{gateway.host}:{gateway.port}"
    served = f"{num_workers} worker(s)"
    if num_models > 1:
        served += f", {num_models} models: the others load on their first request"
    lines = [f"AstrAI Serve ready at {url} ({served})"]
    if gateway.console:
        lines.append(f"  web console        {url}/")
    lines.append(f"  OpenAI API         {url}/v1/chat/completions")
    lines.append(f"  Anthropic API      {url}/v1/messages")
    lines.append(f"  Prometheus metrics {url}/metrics")
    return "\n".join(lines)


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the supervisor dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn(command: ChildCommand) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", command.package, *command.argv]
    return subprocess.Popen(argv, preexec_fn=_die_with_parent)


def workers_ready(url: str) -> int | None:
    """The workers the gateway counts; None while it does not answer (or something else on
    its port answers in another protocol: a ZeroMQ socket's greeting is no HTTP status line)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return int(json.loads(response.read()).get("workers", 0))
    except urllib.error.HTTPError as error:  # 503 while no worker is ready
        return 0 if error.code == 503 else None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
        return None


def run_serve(plan: ServePlan, log_level: str) -> int:
    """Run the gateway and the preloaded models' workers until a signal, a gateway exit or,
    with one model, its crash loop; the gateway loads and unloads the others through the
    model-control socket."""
    workers = {m.entry.name: ModelWorkers(m.entry.name, m.commands, _spawn) for m in plan.models}
    control = ModelControlServer(plan.catalog(), workers)
    gateway = dataclasses.replace(plan.gateway, model_control=control.address)
    children = [_spawn(gateway_command(gateway, log_level))]
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    wakeup = SignalWakeup()
    poller = zmq.Poller()
    poller.register(control.socket, zmq.POLLIN)
    poller.register(wakeup.fileno(), zmq.POLLIN)

    def nap() -> None:
        """Until a signal, a model-control request or the nap's end; answer what came."""
        poller.poll(int(LOOP_NAP_S * 1000))
        wakeup.clear()
        control.answer_pending()

    try:
        preloaded = [workers[m.entry.name] for m in plan.models if m.entry.preload]
        for model in preloaded:
            model.start()
        expected = sum(len(model.commands) for model in preloaded)
        url = f"http://{gateway.host}:{gateway.port}"
        deadline = time.monotonic() + plan.startup_timeout_s
        while not stopping:
            # Ready first: a worker that registered and then died is the running loop's to
            # restart, as one dying at any later time is.
            ready = workers_ready(url)
            if ready is not None and ready >= expected:
                break
            started = [child for model in preloaded for child in model.children]
            if any(child.poll() is not None for child in children + started):
                print("astrai serve: a child process exited during startup", file=sys.stderr)
                return 1
            if time.monotonic() > deadline:
                print("astrai serve: workers did not register in time", file=sys.stderr)
                return 1
            nap()
        if not stopping:
            print(ready_message(gateway, expected, len(plan.models)), flush=True)
        while not stopping:
            if children[0].poll() is not None:
                print("astrai serve: the gateway exited; stopping", file=sys.stderr)
                return 1
            for model in workers.values():
                for line in model.poll(time.monotonic()):
                    print(f"astrai serve: {line}", file=sys.stderr)
                if model.failed and len(workers) == 1:
                    print("astrai serve: the model's workers cannot run; stopping", file=sys.stderr)
                    return 1
            nap()
        return 0
    finally:
        wakeup.close()
        # The gateway first: it drains (running streams get the drain timeout, then end with
        # an error event and are aborted on their workers); only then do the workers stop.
        _terminate(children, gateway.drain_timeout_s + GATEWAY_EXIT_GRACE_S)
        for model in workers.values():
            model.stop()
        for model in workers.values():
            model.reap(WORKER_EXIT_GRACE_S)
        control.close()


def _terminate(children: list[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM each child, then SIGKILL whatever is left after the grace."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()
