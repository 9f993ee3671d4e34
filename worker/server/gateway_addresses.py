"""The gateways a worker dials: its --gateway addresses, each name resolved to all its hosts."""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

# socket.getaddrinfo's shape: (host, port, family, type) → [(family, type, proto, name, addr)]
Lookup = Callable[..., list[tuple[Any, ...]]]


def needs_lookup(address: str) -> bool:
    """A tcp:// address whose host is a name, not an IP literal (nor `*`)."""
    if not address.startswith("tcp://"):
        return False
    host = urlsplit(address).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host not in ("", "*")
    return False


def lookup_address(address: str, lookup: Lookup = socket.getaddrinfo) -> list[str]:
    """Every endpoint a tcp://NAME:PORT address names, sorted: one per IP the name resolves to
    (a headless Service: one per gateway pod). IPv4 ones only when there are any, so that
    `localhost` is one gateway, not two. Raises OSError when the name does not resolve."""
    parts = urlsplit(address)
    port = parts.port
    infos = lookup(parts.hostname, port, socket.AF_UNSPEC, socket.SOCK_STREAM)
    ips = {str(info[4][0]) for info in infos}
    v4 = {ip for ip in ips if ":" not in ip}
    return sorted(
        f"tcp://{ip}:{port}" if ":" not in ip else f"tcp://[{ip}]:{port}" for ip in v4 or ips
    )


class GatewayResolver:
    """Resolves the configured addresses now and then on a thread of its own, so a slow DNS
    never stalls the worker's I/O loop; the loop reads `endpoints()` when it likes.

    A name that stops resolving keeps the endpoints it had (a DNS hiccup is not a lost
    gateway: silence is what drops one); each failure is logged and counted in `failures`.
    """

    def __init__(
        self, addresses: Sequence[str], every_s: float, lookup: Lookup = socket.getaddrinfo
    ) -> None:
        self.addresses = tuple(addresses)
        self.every_s = every_s
        self.lookup = lookup
        self.failures = 0
        self._resolved: dict[str, list[str]] = {
            address: [address] for address in self.addresses if not needs_lookup(address)
        }
        self._failing: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def needs_thread(self) -> bool:
        return any(needs_lookup(address) for address in self.addresses)

    def start(self) -> None:
        if self.needs_thread:
            self._thread = threading.Thread(target=self._run, name="gateway-resolver", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def endpoints(self) -> list[str]:
        """Every endpoint to dial now, each once, in the order the addresses were given."""
        with self._lock:
            found = [e for address in self.addresses for e in self._resolved.get(address, [])]
        return list(dict.fromkeys(found))

    def refresh(self) -> None:
        """Look every name up once more."""
        for address in self.addresses:
            if not needs_lookup(address):
                continue
            try:
                endpoints = lookup_address(address, self.lookup)
            except (OSError, UnicodeError) as exc:
                self.failures += 1
                if address not in self._failing:  # once per streak, not every few seconds
                    log.warning("cannot resolve gateway %s: %s", address, exc)
                self._failing.add(address)
                continue
            self._failing.discard(address)
            with self._lock:
                before = self._resolved.get(address)
                self._resolved[address] = endpoints
            if before != endpoints:
                log.info("gateway %s is now %s", address, ", ".join(endpoints) or "nothing")

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.refresh()
            self._stopping.wait(self.every_s)
