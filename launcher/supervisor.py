"""`astrai serve`: start a gateway and N local workers, wait for them, stop them all together."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from common.cli_options import to_argv
from common.signal_wakeup import SignalWakeup
from gateway.config import GatewayConfig
from worker.engine.options import EngineOptions
from worker.server.process_options import WorkerProcessOptions
from worker.server.worker_config import WorkerConfig

PR_SET_PDEATHSIG = 1
MAX_RESTARTS_PER_MINUTE = 5
# Beyond its drain timeout, what a stopping gateway may take (cut streams flushed, uvicorn's
# own graceful shutdown) before it is killed; and what a worker may take once its gateway is
# gone and it has nothing left to run.
GATEWAY_EXIT_GRACE_S = 10.0
WORKER_EXIT_GRACE_S = 10.0


@dataclasses.dataclass(frozen=True)
class ChildCommand:
    """One child: `python -m <package> <argv>` (the gateway or a worker, never the launcher)."""

    package: str
    argv: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ServePlan:
    """Everything `astrai serve` runs, built and checked before anything starts."""

    gateway: GatewayConfig
    workers: tuple[ChildCommand, ...]
    startup_timeout_s: float


def gateway_command(gateway: GatewayConfig, log_level: str) -> ChildCommand:
    return ChildCommand("gateway", ("--log-level", log_level, *to_argv(gateway)))


def worker_commands(
    num_workers: int,
    gateway: GatewayConfig,
    engine: EngineOptions,
    process: WorkerProcessOptions,
    log_level: str,
) -> tuple[ChildCommand, ...]:
    """Worker i: `worker-i`, its share of the cores and, with `--device cuda`, `cuda:i`."""
    threads = max(1, (os.cpu_count() or 1) // num_workers)  # no oversubscription
    commands = []
    for i in range(num_workers):
        device = f"cuda:{i}" if engine.device == "cuda" and num_workers > 1 else engine.device
        link = WorkerConfig(
            gateways=(gateway.worker_bind,),
            worker_id=f"worker-{i}",
            curve_server_key=gateway.curve_secret_key,  # its public half is in the same file
        )
        options = dataclasses.replace(engine, device=device, num_threads=threads)
        argv = [*to_argv(link), *to_argv(options), *to_argv(process)]
        commands.append(ChildCommand("worker", ("--log-level", log_level, *argv)))
    return tuple(commands)


def ready_message(gateway: GatewayConfig, num_workers: int) -> str:
    """The line `astrai serve` prints once every worker counts, and the URLs to use."""
    url = f"http://{gateway.host}:{gateway.port}"
    lines = [f"AstrAI Serve ready at {url} ({num_workers} worker(s))"]
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


def _workers_ready(url: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return int(json.loads(response.read()).get("workers", 0))
    except (urllib.error.URLError, OSError, ValueError):
        return 0


def run_serve(plan: ServePlan, log_level: str) -> int:
    """Run the gateway and the workers until a signal, a gateway exit or a crash loop."""
    gateway, workers = plan.gateway, plan.workers
    num_workers = len(workers)
    children = [_spawn(gateway_command(gateway, log_level))]
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    wakeup = SignalWakeup()
    try:
        children += [_spawn(command) for command in workers]
        url = f"http://{gateway.host}:{gateway.port}"
        deadline = time.monotonic() + plan.startup_timeout_s
        while not stopping and _workers_ready(url) < num_workers:
            if any(child.poll() is not None for child in children):
                print("astrai serve: a child process exited during startup", file=sys.stderr)
                return 1
            if time.monotonic() > deadline:
                print("astrai serve: workers did not register in time", file=sys.stderr)
                return 1
            wakeup.nap(0.2)
        if not stopping:
            print(ready_message(gateway, num_workers), flush=True)
        restarts: list[float] = []
        while not stopping:
            if children[0].poll() is not None:
                print("astrai serve: the gateway exited; stopping", file=sys.stderr)
                return 1
            for i, child in enumerate(children[1:], start=1):
                if child.poll() is None:
                    continue
                # A crashed worker comes back under a new incarnation; a crash loop stops us.
                now = time.monotonic()
                restarts = [t for t in restarts if now - t < 60] + [now]
                if len(restarts) > MAX_RESTARTS_PER_MINUTE:
                    print("astrai serve: workers keep crashing; stopping", file=sys.stderr)
                    return 1
                print(
                    f"astrai serve: worker-{i - 1} exited ({child.returncode}); restarting",
                    file=sys.stderr,
                )
                children[i] = _spawn(workers[i - 1])
            wakeup.nap(0.2)
        return 0
    finally:
        wakeup.close()
        # The gateway first: it drains (running streams get the drain timeout, then end with
        # an error event and are aborted on their workers); only then do the workers stop.
        _terminate(children[:1], gateway.drain_timeout_s + GATEWAY_EXIT_GRACE_S)
        _terminate(children[1:], WORKER_EXIT_GRACE_S)


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
