"""A free TCP port on loopback, for servers started by tests, benches and `astrai serve`."""

from __future__ import annotations

import socket


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
