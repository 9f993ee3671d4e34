"""WorkerConfig: where a worker dials and the timings of its link, checked when it is built."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.cli_options import option
from common.wire import DEFAULT_MAX_FRAME_BYTES, DEFAULT_WORKER_BIND


@dataclass(frozen=True)
class WorkerConfig:
    """Fields with `option(...)` metadata are flags of `astrai worker`."""

    gateway: str = field(  # tcp://host:port of the gateway's worker socket
        metadata=option("the gateway's worker socket", flag_default=DEFAULT_WORKER_BIND)
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
        if not self.gateway.startswith(("tcp://", "ipc://", "inproc://")):
            raise ValueError(
                f"gateway must be a ZeroMQ address like tcp://host:port, got {self.gateway!r}"
            )
        if self.kv_events_bind not in ("auto", "off") and not self.kv_events_bind.startswith(
            "tcp://"
        ):
            raise ValueError(
                f"kv_events_bind must be auto, off or tcp://HOST:PORT, got {self.kv_events_bind!r}"
            )
        for name in ("heartbeat_s", "gateway_timeout_s", "drain_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
