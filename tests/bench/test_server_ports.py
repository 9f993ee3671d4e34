"""The test servers choose their ports again when another process took one meanwhile."""

from __future__ import annotations

import socket
import threading

import pytest

import bench.server as server_module
from common.ports import free_loopback_port

pytestmark = pytest.mark.slow  # a real `astrai serve`


# The greeting a ZeroMQ socket sends first (a worker's or KV-event socket bound to an
# ephemeral port): not HTTP, so /health gets a bad status line rather than no answer.
ZMTP_GREETING = b"\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f"


def _answer_every_connection(held: socket.socket) -> None:
    while True:
        try:
            connection, _ = held.accept()
        except OSError:  # closed at the end of the test
            return
        with connection:
            connection.sendall(ZMTP_GREETING)


@pytest.mark.parametrize("answers", [False, True], ids=["silent", "zeromq"])
def test_a_server_whose_port_was_taken_starts_on_another(monkeypatch, answers):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    if answers:
        threading.Thread(target=_answer_every_connection, args=(held,), daemon=True).start()
    choices = [taken]
    monkeypatch.setattr(
        server_module,
        "free_loopback_port",
        lambda: choices.pop(0) if choices else free_loopback_port(),
    )
    server = server_module.Server("serve", "--kv-cache-mb", "64")
    try:
        assert server.port == taken
        server.wait_ready(timeout_s=120)
        assert server.port != taken and server.stats()["workers"]
    finally:
        server.stop()
        held.close()
    assert not server.group_alive()
