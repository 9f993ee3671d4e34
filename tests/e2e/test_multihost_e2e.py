"""Gateway and two workers on three network "hosts" (namespaces + veth), CURVE on."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.server import REPO, wait_until
from tests.e2e.test_curve_e2e import make_keys

pytestmark = pytest.mark.slow


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


class Hosts:
    """Namespaces `gw`, `w1`, `w2`; w1 and w2 each reach gw over their own veth link."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.names = {role: f"astrai-{role}-{tag}" for role in ("gw", "w1", "w2")}
        self.processes: list[subprocess.Popen[bytes]] = []

    def create(self) -> None:
        for name in self.names.values():
            done = ip("netns", "add", name)
            if done.returncode != 0:
                raise PermissionError(done.stderr.strip())
            ip("-n", name, "link", "set", "lo", "up")
        for i, worker in ((1, "w1"), (2, "w2")):
            tag = self.names[worker].rsplit("-", 1)[1]
            gw_end, w_end = f"g{i}-{tag}", f"w{i}-{tag}"
            ip("link", "add", gw_end, "type", "veth", "peer", "name", w_end)
            ip("link", "set", gw_end, "netns", self.names["gw"])
            ip("link", "set", w_end, "netns", self.names[worker])
            ip("-n", self.names["gw"], "addr", "add", f"10.77.{i}.1/24", "dev", gw_end)
            ip("-n", self.names[worker], "addr", "add", f"10.77.{i}.2/24", "dev", w_end)
            ip("-n", self.names["gw"], "link", "set", gw_end, "up")
            ip("-n", self.names[worker], "link", "set", w_end, "up")

    def run(self, role: str, *argv: str) -> subprocess.Popen[bytes]:
        command = ["ip", "netns", "exec", self.names[role], sys.executable, *argv]
        process = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.processes.append(process)
        return process

    def call(self, role: str, code: str, timeout: float = 60) -> str:
        command = ["ip", "netns", "exec", self.names[role], sys.executable, "-c", code]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        return done.stdout

    def destroy(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for name in self.names.values():
            pids = ip("netns", "pids", name).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            ip("netns", "del", name)


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip`) is not installed")
    hosts = Hosts()
    try:
        hosts.create()
    except PermissionError as error:
        hosts.destroy()
        pytest.skip(f"network namespaces are not permitted here: {error}")
    try:
        yield hosts
    finally:
        hosts.destroy()


HEALTH = """
import json, urllib.request
try:
    reply = urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).read()
    print(json.loads(reply)['workers'])
except Exception:
    print(0)
"""

STREAM = """
import json, urllib.request
body = json.dumps({"messages": [{"role": "user", "content": "hello across hosts"}],
                   "max_tokens": 6, "temperature": 0, "stream": True, "ignore_eos": True}).encode()
request = urllib.request.Request('http://127.0.0.1:8000/v1/chat/completions', body,
                                 {'content-type': 'application/json'})
print(json.dumps([line.decode().strip() for line in urllib.request.urlopen(request, timeout=60)
                  if line.strip()]))
"""


def test_a_stream_crosses_real_addresses_with_curve(hosts: Hosts, tiny_model_dir: Path, tmp_path):
    server_public, server_secret = make_keys(tmp_path, "gateway")
    hosts.run(
        "gw",
        "-m",
        "launcher",
        "--log-level",
        "warning",
        "gateway",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--worker-bind",
        "tcp://0.0.0.0:5557",
        "--curve-secret-key",
        str(server_secret),
    )
    for i, role in ((1, "w1"), (2, "w2")):
        hosts.run(
            role,
            "-m",
            "launcher",
            "--log-level",
            "warning",
            "worker",
            "--gateway",
            f"tcp://10.77.{i}.1:5557",
            "--worker-id",
            role,
            "--threads",
            "1",
            "--model",
            str(tiny_model_dir),
            "--dtype",
            "float32",
            "--kv-cache-mb",
            "32",
            "--curve-server-key",
            str(server_public),
        )
    assert wait_until(lambda: hosts.call("gw", HEALTH).strip() == "2", 120, interval_s=1.0)
    lines = json.loads(hosts.call("gw", STREAM))
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
