"""Two gateways × two workers on four network "hosts" (namespaces + veth links): the workers
find the gateways through one name that resolves to both (looked up again while running),
32 streams go through each gateway, one gateway is SIGKILLed mid-run, and a new one on its
address is joined by both workers without restarting them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.server import REPO, wait_until
from tests.e2e.fleet import (
    GATEWAY_TIMEOUT_S,
    num_queued,
    only_its_own_run,
    pages_free,
    worker_figures,
)
from tests.e2e.test_multihost_e2e import ip

pytestmark = pytest.mark.slow
GATEWAYS, WORKERS = ("gw1", "gw2"), ("w1", "w2")
NAME = "astrai-gateways"  # what the workers dial: a name for every gateway, like a headless Service
STREAMS = 32


def link_address(gateway: str, worker: str) -> str:
    """The gateway's end of its own link to that worker."""
    return f"10.78.{gateway[-1]}{worker[-1]}.1"


class Fleet:
    """A namespace per gateway and per worker, a veth link between every gateway and every
    worker; each worker's /etc/hosts (ip netns exec's /etc/netns/NS/hosts) names the gateways."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.names = {role: f"astrai-{role}-{self.tag}" for role in (*GATEWAYS, *WORKERS)}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def create(self) -> None:
        for name in self.names.values():
            done = ip("netns", "add", name)
            if done.returncode != 0:
                raise PermissionError(done.stderr.strip())
            ip("-n", name, "link", "set", "lo", "up")
        for gateway in GATEWAYS:
            for worker in WORKERS:
                g_end, w_end = f"{gateway}{worker}-{self.tag}", f"{worker}{gateway}-{self.tag}"
                ip("link", "add", g_end, "type", "veth", "peer", "name", w_end)
                ip("link", "set", g_end, "netns", self.names[gateway])
                ip("link", "set", w_end, "netns", self.names[worker])
                at = link_address(gateway, worker)
                ip("-n", self.names[gateway], "addr", "add", f"{at}/24", "dev", g_end)
                ip("-n", self.names[worker], "addr", "add", f"{at[:-1]}2/24", "dev", w_end)
                ip("-n", self.names[gateway], "link", "set", g_end, "up")
                ip("-n", self.names[worker], "link", "set", w_end, "up")

    def name_gateways(self, *gateways: str) -> None:
        """What NAME resolves to on each worker host from now on (the file is rewritten in
        place: the bind mount of a running process sees it)."""
        for worker in WORKERS:
            folder = Path("/etc/netns") / self.names[worker]
            folder.mkdir(parents=True, exist_ok=True)
            lines = ["127.0.0.1 localhost"] + [
                f"{link_address(g, worker)} {NAME}" for g in gateways
            ]
            with open(folder / "hosts", "w") as file:
                file.write("\n".join(lines) + "\n")

    def run(self, role: str, *argv: str, key: str | None = None) -> subprocess.Popen[bytes]:
        command = ["ip", "netns", "exec", self.names[role], sys.executable, *argv]
        process = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.processes[key or f"{role}-{len(self.processes)}"] = process
        return process

    def call(self, role: str, code: str, timeout: float = 30) -> str:
        command = ["ip", "netns", "exec", self.names[role], sys.executable, "-c", code]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        return done.stdout

    def destroy(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for name in self.names.values():
            for pid in ip("netns", "pids", name).stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            ip("netns", "del", name)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip`) is not installed")
    fleet = Fleet()
    try:
        fleet.create()
    except PermissionError as error:
        fleet.destroy()
        pytest.skip(f"network namespaces are not permitted here: {error}")
    try:
        yield fleet
    finally:
        fleet.destroy()


STATS = """
import json, urllib.request
try:
    print(urllib.request.urlopen('http://127.0.0.1:8000/stats', timeout=2).read().decode())
except Exception:
    print('{}')
"""
CLIENT = "import sys; from tests.e2e.fleet import run_streams; run_streams(sys.argv[1:])"


def start_gateway(fleet: Fleet, role: str) -> subprocess.Popen[bytes]:
    argv = ["-m", "launcher", "--log-level", "warning", "gateway", "--host", "127.0.0.1"]
    argv += ["--port", "8000", "--worker-bind", "tcp://0.0.0.0:5557"]
    return fleet.run(role, *argv, key=role)


def stats(fleet: Fleet, role: str) -> dict:
    return json.loads(fleet.call(role, STATS) or "{}")


def test_two_gateways_share_two_workers_and_survive_a_sigkill(fleet: Fleet, tmp_path: Path):
    fleet.name_gateways("gw1")  # at first the name knows one gateway
    for role in GATEWAYS:
        start_gateway(fleet, role)
    for worker in WORKERS:
        argv = ["-m", "launcher", "--log-level", "warning", "worker", "--gateway"]
        argv += [f"tcp://{NAME}:5557", "--worker-id", worker, "--threads", "1"]
        fleet.run(worker, *argv, "--kv-cache-mb", "64")
    both = ["w1", "w2"]
    assert wait_until(lambda: sorted(worker_figures(stats(fleet, "gw1"), "pid")) == both, 120, 1.0)
    pids = worker_figures(stats(fleet, "gw1"), "pid")
    fleet.name_gateways("gw1", "gw2")  # a second gateway pod: the workers look the name up again
    assert wait_until(lambda: worker_figures(stats(fleet, "gw2"), "pid") == pids, 30, 0.5)

    # Long streams through gw1, short ones through gw2; gw1 dies while all of them run.
    outcomes = {role: tmp_path / f"{role}.json" for role in GATEWAYS}
    url = "http://127.0.0.1:8000"
    finished_before = sum(worker_figures(stats(fleet, "gw2"), "finished_tasks").values())
    fleet.run("gw1", "-c", CLIENT, url, str(STREAMS), "400", str(outcomes["gw1"]))
    assert wait_until(lambda: stats(fleet, "gw1").get("open_requests") == STREAMS, 60, 0.2)
    fleet.run("gw2", "-c", CLIENT, url, str(STREAMS), "24", str(outcomes["gw2"]), key="client2")
    assert wait_until(lambda: stats(fleet, "gw2").get("open_requests", 0) > 0, 30, 0.05)
    assert wait_until(lambda: num_queued(stats(fleet, "gw2")) >= STREAMS, 30, 0.1)  # gw1's too
    fleet.processes["gw1"].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()

    # Within the workers' timeout and a second, nothing of gw1's is left on them (what they
    # run is gw2's), while gw2's streams run to their end; then every page is free.
    deadline = killed_at + GATEWAY_TIMEOUT_S + 1
    left_s = max(0.0, deadline - time.monotonic())
    assert wait_until(lambda: only_its_own_run(stats(fleet, "gw2")), left_s, 0.05)
    fleet.processes["client2"].wait(120)
    assert json.loads(outcomes["gw2"].read_text()) == {"count": STREAMS, "whole": STREAMS}
    assert wait_until(lambda: pages_free(stats(fleet, "gw2")), 5, 0.1)
    figures = stats(fleet, "gw2")
    finished = sum(worker_figures(figures, "finished_tasks").values()) - finished_before
    assert finished == STREAMS
    assert worker_figures(figures, "gateways") == {"w1": 1, "w2": 1}

    # A new gateway on gw1's address: both workers, the same processes, register with it.
    start_gateway(fleet, "gw1")
    assert wait_until(lambda: worker_figures(stats(fleet, "gw1"), "pid") == pids, 30, 0.5)
    fleet.run("gw1", "-c", CLIENT, url, "2", "8", str(outcomes["gw1"]), key="client1b")
    fleet.processes["client1b"].wait(60)
    assert json.loads(outcomes["gw1"].read_text()) == {"count": 2, "whole": 2}
