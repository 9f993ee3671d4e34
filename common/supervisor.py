"""`astrai serve`: start a gateway and N local workers, wait for them, stop them all together."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1
MAX_RESTARTS_PER_MINUTE = 5
# Beyond its drain timeout, what a stopping gateway may take (cut streams flushed, uvicorn's
# own graceful shutdown) before it is killed; and what a worker may take once its gateway is
# gone and it has nothing left to run.
GATEWAY_EXIT_GRACE_S = 10.0
WORKER_EXIT_GRACE_S = 10.0


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the supervisor dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn(argv: Sequence[str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "common.cli", *argv]
    return subprocess.Popen(command, preexec_fn=_die_with_parent)


def _workers_ready(url: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return int(json.loads(response.read()).get("workers", 0))
    except (urllib.error.URLError, OSError, ValueError):
        return 0


def _engine_argv(args: argparse.Namespace) -> list[str]:
    argv = [
        "--dtype",
        args.dtype,
        "--kv-cache-mb",
        str(args.kv_cache_mb),
        "--max-seqs",
        str(args.max_seqs),
        "--prefill-token-budget",
        str(args.prefill_token_budget),
    ]
    for flag, value in (
        ("--model", args.model),
        ("--served-model-name", args.served_model_name),
        ("--max-model-len", args.max_model_len),
        ("--quantization", args.quantization),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if args.no_prefix_caching:
        argv.append("--no-prefix-caching")
    if args.compile:
        argv.append("--compile")
    return argv


def _gateway_argv(args: argparse.Namespace, worker_bind: str) -> list[str]:
    """The command line of `astrai serve`'s gateway: its own gateway options, passed on."""
    argv = [
        "--log-level",
        args.log_level,
        "gateway",
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--worker-bind",
        worker_bind,
        "--routing",
        args.routing,
        "--heartbeat-timeout",
        str(args.heartbeat_timeout),
        "--max-body-bytes",
        str(args.max_body_bytes),
        "--max-in-flight",
        str(args.max_in_flight),
        "--max-queued",
        str(args.max_queued),
        "--queue-timeout",
        str(args.queue_timeout),
        "--drain-timeout",
        str(args.drain_timeout),
        "--header-timeout",
        str(args.header_timeout),
        "--body-timeout",
        str(args.body_timeout),
    ]
    if args.api_key:
        argv += ["--api-key", args.api_key]
    for flag, value in (
        ("--curve-secret-key", args.curve_secret_key),
        ("--curve-authorized-keys", args.curve_authorized_keys),
    ):
        if value is not None:
            argv += [flag, value]
    for origin in args.cors_origin:
        argv += ["--cors-origin", origin]
    if args.no_console:
        argv.append("--no-console")
    return argv


def run_serve(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise SystemExit(f"--workers must be >= 1, got {args.workers}")
    if args.curve_authorized_keys is not None:
        raise SystemExit(
            "--curve-authorized-keys restricts remote workers: run `astrai gateway` and "
            "`astrai worker --curve-secret-key ...` for that"
        )
    worker_bind = args.worker_bind or f"tcp://127.0.0.1:{free_loopback_port()}"
    gateway_argv = _gateway_argv(args, worker_bind)
    threads = max(1, (os.cpu_count() or 1) // args.workers)  # split the cores, no oversubscription
    children = [_spawn(gateway_argv)]
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker_argvs = []
    for i in range(args.workers):
        worker_argv = ["--log-level", args.log_level, "worker", "--gateway", worker_bind]
        worker_argv += ["--worker-id", f"worker-{i}", "--threads", str(threads)]
        device = f"cuda:{i}" if args.device == "cuda" and args.workers > 1 else args.device
        worker_argv += ["--device", device]
        if args.curve_secret_key is not None:  # its public half is in the same file
            worker_argv += ["--curve-server-key", args.curve_secret_key]
        worker_argvs.append(worker_argv + _engine_argv(args))
    try:
        children += [_spawn(argv) for argv in worker_argvs]
        url = f"http://{args.host}:{args.port}"
        deadline = time.monotonic() + args.startup_timeout
        while not stopping and _workers_ready(url) < args.workers:
            if any(child.poll() is not None for child in children):
                print("astrai serve: a child process exited during startup", file=sys.stderr)
                return 1
            if time.monotonic() > deadline:
                print("astrai serve: workers did not register in time", file=sys.stderr)
                return 1
            time.sleep(0.2)
        if not stopping:
            print(f"AstrAI Serve ready at {url} ({args.workers} worker(s))", flush=True)
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
                children[i] = _spawn(worker_argvs[i - 1])
            time.sleep(0.2)
        return 0
    finally:
        # The gateway first: it drains (running streams get the drain timeout, then end with
        # an error event and are aborted on their workers); only then do the workers stop.
        _terminate(children[:1], args.drain_timeout + GATEWAY_EXIT_GRACE_S)
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
