"""GatewayConfig: every gateway setting, validated when built."""

from __future__ import annotations

from dataclasses import dataclass

from common.wire import DEFAULT_MAX_FRAME_BYTES, DEFAULT_WORKER_BIND


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    worker_bind: str = DEFAULT_WORKER_BIND
    api_key: str | None = None
    max_body_bytes: int = 8 * 1024 * 1024
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    routing: str = "cache_aware"
    heartbeat_timeout_s: float = 3.0
    accept_timeout_s: float = 60.0  # a worker that never answers Submit
    submit_attempts: int = 2  # a request not yet accepted is retried once elsewhere
    max_in_flight: int = 256  # requests being served at once
    max_queued: int = 512  # more requests waiting for a turn; beyond: 429 / 529
    queue_timeout_s: float = 30.0
    drain_timeout_s: float = 30.0  # SIGTERM: how long in-flight streams may take to finish
    header_timeout_s: float = 10.0  # a request line + headers slower than this: 408, closed
    body_timeout_s: float = 30.0  # a request body slower than this is refused with 408
    curve_secret_key: str | None = None  # the gateway's .key_secret: encrypt worker links
    curve_authorized_keys: str | None = None  # folder of worker .key files allowed in
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call the API; "*": any
    console: bool = True  # the web console at GET / (playground and live dashboard)

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if not self.worker_bind.startswith(("tcp://", "ipc://", "inproc://")):
            raise ValueError(
                f"worker_bind must be a ZeroMQ address like tcp://127.0.0.1:5557, "
                f"got {self.worker_bind!r}"
            )
        for name in ("max_body_bytes", "max_frame_bytes", "submit_attempts", "max_in_flight"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_queued < 0:
            raise ValueError(f"max_queued must be >= 0, got {self.max_queued}")
        for name in (
            "heartbeat_timeout_s",
            "accept_timeout_s",
            "queue_timeout_s",
            "drain_timeout_s",
            "header_timeout_s",
            "body_timeout_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.curve_authorized_keys is not None and self.curve_secret_key is None:
            raise ValueError("curve_authorized_keys needs curve_secret_key")
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must not be empty")
        for origin in self.cors_origins:
            # A browser's Origin header is scheme://host[:port], never with a path or "/".
            is_origin = origin.startswith(("http://", "https://")) and "/" not in origin[8:]
            if origin != "*" and not is_origin:
                raise ValueError(
                    f"cors_origins must be * or origins like https://example.com, got {origin!r}"
                )
