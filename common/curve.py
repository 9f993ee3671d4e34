"""ZeroMQ CURVE keys: generate key pairs and apply them to gateway and worker sockets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import zmq
import zmq.auth


def generate_keys(out_dir: Path, name: str) -> tuple[Path, Path]:
    """Write `name.key` (public, to share) and `name.key_secret` (keep private) in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(str(out_dir), name)
    Path(secret).chmod(0o600)
    return Path(public), Path(secret)


def load_public(path: str | Path) -> bytes:
    public, _ = zmq.auth.load_certificate(str(path))
    return public


def load_pair(path: str | Path) -> tuple[bytes, bytes]:
    public, secret = zmq.auth.load_certificate(str(path))
    if secret is None:
        raise ValueError(f"{path} holds no secret key; pass the .key_secret file")
    return public, secret


def make_server(socket: zmq.Socket[Any], secret_file: str | Path) -> None:
    """The gateway's ROUTER: encrypts, and only completes handshakes with CURVE clients."""
    public, secret = load_pair(secret_file)
    socket.curve_publickey = public
    socket.curve_secretkey = secret
    socket.curve_server = True


def make_client(
    socket: zmq.Socket[Any], server_public_file: str | Path, secret_file: str | Path | None
) -> None:
    """A worker's DEALER: talks only to the gateway holding the server key's secret half."""
    if secret_file is None:
        public, secret = zmq.curve_keypair()  # accepted only by a gateway without an allow-list
    else:
        public, secret = load_pair(secret_file)
    socket.curve_publickey = public
    socket.curve_secretkey = secret
    socket.curve_serverkey = load_public(server_public_file)
