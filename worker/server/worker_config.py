"""WorkerConfig: the gateways a worker dials and the timings of its links, checked when built."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from common.cli_options import option
from common.wire_defaults import DEFAULT_MAX_FRAME_BYTES, DEFAULT_WORKER_BIND


@dataclass(frozen=True)
class WorkerConfig:
    """Fields with `option(...)` metadata are flags of `astrai worker`."""

    # tcp://host:port of each gateway's worker socket. A host name is looked up again every
    # `resolve_every_s`, and each address it names is a gateway (a headless Service's pods).
    gateways: tuple[str, ...] = field(
        metadata=option(
            "a gateway's worker socket, tcp://HOST:PORT; repeat it for several gateways, or "
            "give a name that resolves to each of them (a Kubernetes headless Service)",
            flag="--gateway",
            metavar="ADDRESS",
            flag_default=(DEFAULT_WORKER_BIND,),
        )
    )
    worker_id: str = field(
        metadata=option(
            "a name unique among the workers (default: host-pid-random)", flag_default=None
        )
    )
    kv_events_bind: str = field(
        default="auto",
        metadata=option(
            "publish KV-cache events (docs/KV_EVENTS.md) on tcp://HOST:PORT, replay on PORT+1;"
            " auto: free ports on the address facing the gateway; off: none",
            metavar="ADDR",
        ),
    )
    heartbeat_s: float = 0.5
    register_every: int = 10  # heartbeats; a gateway that restarted learns us again
    gateway_timeout_s: float = 3.0  # no GatewayBeat for this long: the gateway is gone
    resolve_every_s: float = 5.0  # gateway host names are looked up again this often
    drain_timeout_s: float = 120.0  # SIGTERM: finish running work, at most this long
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    curve_server_key: str | None = field(
        default=None, metadata=option("the gateway's public .key: encrypt the link (CURVE)")
    )
    curve_secret_key: str | None = field(
        default=None,
        metadata=option("this worker's .key_secret (default: a fresh pair)"),
    )

    def __post_init__(self) -> None:
        if not self.gateways:
            raise ValueError("gateways must name at least one gateway, got none")
        for gateway in self.gateways:
            if not gateway.startswith(("tcp://", "ipc://", "inproc://")) or (
                gateway.startswith("tcp://") and _port(gateway) is None
            ):
                raise ValueError(
                    f"gateway must be a ZeroMQ address like tcp://host:port, got {gateway!r}"
                )
        if self.kv_events_bind not in ("auto", "off") and not self.kv_events_bind.startswith(
            "tcp://"
        ):
            raise ValueError(
                f"kv_events_bind must be auto, off or tcp://HOST:PORT, got {self.kv_events_bind!r}"
            )
        for name in ("heartbeat_s", "gateway_timeout_s", "drain_timeout_s", "resolve_every_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


def _port(address: str) -> int | None:
    try:
        return urlsplit(address).port
    except ValueError:  # not a number, or out of range
        return None
