"""CURVE between gateway and workers: a peer without the right keys delivers nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import zmq

from bench.server import REPO, Server, WorkerProcess, http_json
from common.curve import load_pair, load_public
from common.schemas import Heartbeat, Register
from common.wire import encode

pytestmark = pytest.mark.slow


def make_keys(folder: Path, name: str) -> tuple[Path, Path]:
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "keys", "--out", str(folder), "--name", name],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "secret key" in done.stdout
    return folder / f"{name}.key", folder / f"{name}.key_secret"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("keys")
    allowed = root / "allowed"
    pairs = {
        "gateway": make_keys(root, "gateway"),
        "worker": make_keys(allowed, "worker"),  # its public key sits in the allow-list
        "rogue": make_keys(root, "rogue"),
    }
    pairs["worker"][1].rename(root / "worker.key_secret")  # keep secrets out of the list
    pairs["worker"] = (pairs["worker"][0], root / "worker.key_secret")
    return pairs


@pytest.fixture(scope="module")
def secured(tiny_model_dir: Path, keys) -> Iterator[Server]:
    gateway = Server(
        "gateway",
        "--curve-secret-key",
        str(keys["gateway"][1]),
        "--curve-authorized-keys",
        str(keys["worker"][0].parent),
    )
    worker = WorkerProcess(
        gateway.worker_bind,
        "--model",
        str(tiny_model_dir),
        "--dtype",
        "float32",
        "--kv-cache-mb",
        "32",
        "--curve-server-key",
        str(keys["gateway"][0]),
        "--curve-secret-key",
        str(keys["worker"][1]),
        worker_id="trusted",
    )
    try:
        yield gateway.wait_ready(workers=1, timeout_s=120)
    finally:
        worker.stop()
        gateway.stop()


def pester(address: str, identity: str, curve: dict[str, bytes] | None) -> None:
    """Try for a second to register as a worker and send heartbeats."""
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, identity.encode())
    sock.setsockopt(zmq.LINGER, 0)
    for option, value in (curve or {}).items():
        setattr(sock, option, value)
    sock.connect(address)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        with_timeout = zmq.NOBLOCK
        try:
            sock.send(encode(Register(identity, "x", "evil", 512, 8, 10, 16, 1, "h")), with_timeout)
            sock.send(encode(Heartbeat(identity, "x", 0, 0, 10, 10, 0)), with_timeout)
        except zmq.Again:
            pass
        time.sleep(0.05)
    sock.close()
    context.term()


def test_only_the_trusted_worker_gets_in(secured: Server, keys):
    before = http_json(f"{secured.url}/stats")[1]
    server_public = load_public(keys["gateway"][0])
    rogue_public, rogue_secret = load_pair(keys["rogue"][1])
    pester(secured.worker_bind, "plaintext", None)
    pester(
        secured.worker_bind,
        "unlisted",
        {
            "curve_serverkey": server_public,
            "curve_publickey": rogue_public,
            "curve_secretkey": rogue_secret,
        },
    )
    pester(
        secured.worker_bind,
        "wrong-server-key",
        {
            "curve_serverkey": rogue_public,
            "curve_publickey": rogue_public,
            "curve_secretkey": rogue_secret,
        },
    )
    after = http_json(f"{secured.url}/stats")[1]
    assert [w["worker_id"] for w in after["workers"]] == ["trusted"]
    assert after["dropped_frames"] == before["dropped_frames"]  # not even garbage got through
    body = {"messages": [{"role": "user", "content": "still there?"}], "max_tokens": 3}
    response = httpx.post(f"{secured.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200
