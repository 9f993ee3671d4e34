"""Servers in their own process groups for tests and benches: astrai's, and llama.cpp's."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from common.ports import free_loopback_port

REPO = Path(__file__).resolve().parents[1]
# bench/gpu_check.sh runs the end-to-end tests with their workers on a GPU: this device
# (default: none given, the CPU), for served workers and in-process engines alike.
TEST_DEVICE = os.environ.get("ASTRAI_TEST_DEVICE")


class ProcessLog:
    """A child's stdout and stderr in a file rather than thrown away, so that a failing test
    can show what its servers said (tests/conftest.py prints the tails)."""

    started: ClassVar[list[ProcessLog]] = []
    folder = Path(tempfile.gettempdir()) / "astrai-logs"

    def __init__(self, name: str) -> None:
        self.folder.mkdir(exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=".log", dir=self.folder)
        self.name, self.path = name, Path(path)
        self.file = os.fdopen(fd, "wb")
        ProcessLog.started.append(self)

    def tail(self, lines: int = 60) -> str:
        text = self.path.read_text(errors="replace") if self.path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        self.file.close()

    @classmethod
    def remove_all(cls) -> None:
        for log in cls.started:
            log.close()
            log.path.unlink(missing_ok=True)
        cls.started.clear()


class KVFolder:
    """A fresh folder for a server's KV disk tier, unless its args name one (or turn the tier
    off): a test or a bench round never finds pages another one left, and leaves none."""

    def __init__(self, args: tuple[str, ...]) -> None:
        given = any(a.startswith(("--kv-disk-dir", "--kv-disk-mb")) for a in args)
        self.path = None if given else Path(tempfile.mkdtemp(prefix="astrai-kv-"))

    @property
    def args(self) -> list[str]:
        return [] if self.path is None else ["--kv-disk-dir", str(self.path)]

    def remove(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


def http_json(url: str, timeout: float = 5.0) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


class Server:
    """`astrai serve` (or `astrai gateway`) in its own process group."""

    def __init__(
        self,
        command: str,
        *args: str,
        workers: int = 1,
        port: int | None = None,
        worker_bind: str | None = None,
        before_exec: Callable[[], None] | None = None,
    ) -> None:
        """`before_exec` runs in the child before it starts (its limits: resource.setrlimit),
        and its children inherit what it sets."""
        self.command, self.args, self.workers = command, args, workers
        self.before_exec = before_exec
        self.own_ports = port is None and worker_bind is None  # ours to choose again
        self.port = port or free_loopback_port()
        self.worker_bind = worker_bind or f"tcp://127.0.0.1:{free_loopback_port()}"
        self.kv_folder = KVFolder(args if command == "serve" else ("--kv-disk-mb",))
        self._start()

    def _start(self) -> None:
        command, args = self.command, self.args
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "launcher", "--log-level", "warning", command]
        argv += ["--port", str(self.port), *args]
        if command == "serve":
            argv += ["--workers", str(self.workers), *self.kv_folder.args]
            if TEST_DEVICE and "--device" not in args:
                argv += ["--device", TEST_DEVICE]
        else:
            argv += ["--worker-bind", self.worker_bind]
        self.log = ProcessLog(command)
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            start_new_session=True,
            stdout=self.log.file,
            stderr=subprocess.STDOUT,
            preexec_fn=self.before_exec,
        )

    def _lost_its_port(self) -> bool:
        """It exited because a port chosen free was taken meanwhile (another process's
        ephemeral bind, such as a worker's KV-event socket, between our check and its bind)."""
        return self.own_ports and "address already in use" in self.log.tail(20)

    def wait_ready(self, timeout_s: float = 180.0, workers: int | None = None) -> Server:
        """Until /health reports the workers (or, for a bare gateway, answers at all)."""
        wanted = self.workers if workers is None else workers
        deadline = time.monotonic() + timeout_s
        port_retries = 3
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if port_retries and self._lost_its_port():
                    port_retries -= 1
                    self.stop()
                    self.port = free_loopback_port()
                    self.worker_bind = f"tcp://127.0.0.1:{free_loopback_port()}"
                    self._start()
                    continue
                raise RuntimeError(f"server exited with {self.process.returncode}")
            try:
                status, body = http_json(f"{self.url}/health", timeout=2)
                if (wanted == 0 and status in (200, 503)) or body.get("workers", 0) >= wanted:
                    return self
            # Not up yet, or another process holds the port (a ZeroMQ socket answers with its
            # greeting, a bad status line): the server then exits and is started again above.
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"server not ready within {timeout_s} s")

    def stats(self) -> dict:
        return http_json(f"{self.url}/stats")[1]

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the server and wait; then make sure nothing of its group is left."""
        terminate(self.process, timeout_s)
        self.log.close()
        self.kv_folder.remove()

    def group_alive(self) -> bool:
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True


class LlamaServer:
    """llama.cpp's own `llama-server` (bench/build_llama_server.sh builds it), for baselines.

    Started by default as the speed comparison wants it: 2 threads like our worker, 32
    parallel slots with continuous batching, a 32,768-token context shared by the slots.
    """

    ARGS = ("-t", "2", "-np", "32", "-c", "32768", "-cb")

    def __init__(self, binary: Path, model: Path, args: tuple[str, ...] = ARGS) -> None:
        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [str(binary), "-m", str(model), *args]
        argv += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.log = ProcessLog("llama-server")
        self.process = subprocess.Popen(
            argv, start_new_session=True, stdout=self.log.file, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout_s: float = 120.0) -> LlamaServer:
        def answers() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode}")
            try:
                return http_json(f"{self.url}/health", timeout=2)[0] == 200
            except (OSError, ValueError):
                return False

        if not wait_until(answers, timeout_s, 0.2):
            self.stop()
            raise TimeoutError(f"llama-server not ready within {timeout_s} s")
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        terminate(self.process, timeout_s)
        self.log.close()


def wait_until(predicate, timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


class WorkerProcess:
    """`astrai worker` dialing a gateway, in its own process group."""

    def __init__(self, gateway: str, *args: str, worker_id: str) -> None:
        self.worker_id = worker_id
        argv = [sys.executable, "-m", "launcher", "--log-level", "warning", "worker"]
        argv += ["--gateway", gateway, "--worker-id", worker_id, "--threads", "1", *args]
        if TEST_DEVICE and "--device" not in args:
            argv += ["--device", TEST_DEVICE]
        self.kv_folder = KVFolder(args)
        argv += self.kv_folder.args
        self.log = ProcessLog(f"worker-{worker_id}")
        self.process = subprocess.Popen(
            argv, cwd=REPO, start_new_session=True, stdout=self.log.file, stderr=subprocess.STDOUT
        )

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def stop(self, timeout_s: float = 30.0) -> None:
        terminate(self.process, timeout_s)
        self.log.close()
        self.kv_folder.remove()


def terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM (after SIGCONT: a stopped process cannot act on it), wait, then SIGKILL the
    process and anything left in its process group."""
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
