"""ModelWorkers: one model's local worker processes, started, restarted after a crash,
stopped, and their memory read from /proc."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.model_control import ModelProcesses
from worker.cli import CANNOT_LOAD_EXIT

MAX_RESTARTS_PER_MINUTE = 5
# An unloaded model's worker finishes what it runs, then exits; one still there after this
# is killed (the gateway waits for its memory to come back before loading another model).
STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class ChildCommand:
    """One child: `python -m <package> <argv>` (the gateway or a worker, never the launcher)."""

    package: str
    argv: tuple[str, ...]


Spawn = Callable[[ChildCommand], "subprocess.Popen[bytes]"]


def rss_mb(pid: int) -> float:
    """A process's resident memory in MiB (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


class ModelWorkers:
    """A model's workers. `wanted` says whether they should run: a crashed one is started
    again while it is, unless it could not load the model or they crash in a loop; then the
    model has `failed` (until the next start) and its workers are stopped."""

    def __init__(self, name: str, commands: tuple[ChildCommand, ...], spawn: Spawn) -> None:
        self.name, self.commands, self._spawn = name, commands, spawn
        self.children: list[subprocess.Popen[bytes]] = []
        self.wanted = False
        self.failed = ""
        self._restarts: list[float] = []
        self._stopped_at = 0.0

    def start(self) -> None:
        """Its workers, unless they run already."""
        self.wanted, self.failed = True, ""
        alive = [child for child in self.children if child.poll() is None]
        if not alive:
            self.children = [self._spawn(command) for command in self.commands]

    def stop(self) -> None:
        """SIGTERM its workers: each finishes what it runs and exits (see `reap`)."""
        self.wanted = False
        self._stopped_at = time.monotonic()
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def running(self) -> int:
        return sum(child.poll() is None for child in self.children)

    def status(self) -> ModelProcesses:
        alive = [child for child in self.children if child.poll() is None]
        return ModelProcesses(len(alive), sum(rss_mb(child.pid) for child in alive), self.failed)

    def poll(self, now: float) -> list[str]:
        """Start again what crashed while wanted, kill what outstays its stop; what
        happened, one line each."""
        if not self.wanted and now - self._stopped_at > STOP_GRACE_S:
            for child in self.children:
                if child.poll() is None:
                    child.kill()
        said = []
        for i, child in enumerate(self.children):
            code = child.poll()
            if code is None or not self.wanted:
                continue
            if code == CANNOT_LOAD_EXIT:
                self._fail(f"its worker cannot load the model (exit {code}; see the log)")
                return [f"model {self.name}: {self.failed}"]
            self._restarts = [t for t in self._restarts if now - t < 60] + [now]
            if len(self._restarts) > MAX_RESTARTS_PER_MINUTE:
                self._fail(f"its workers keep crashing (last exit {code})")
                return [f"model {self.name}: {self.failed}"]
            said.append(f"model {self.name}: worker {i} exited ({code}); restarting")
            self.children[i] = self._spawn(self.commands[i])
        return said

    def _fail(self, why: str) -> None:
        self.stop()
        self.failed = why

    def reap(self, grace_s: float) -> None:
        """Wait for its workers to exit; SIGKILL what is left after `grace_s`."""
        self.stop()
        deadline = time.monotonic() + grace_s
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()
