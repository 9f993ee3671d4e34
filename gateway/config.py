"""GatewayConfig: every gateway setting, validated when built; its flags are declared here."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.cli_options import option
from common.wire_defaults import DEFAULT_MAX_FRAME_BYTES, DEFAULT_WORKER_BIND
from gateway.routing_names import ROUTING_POLICIES

MAX_TOKENS_POLICIES = ("clamp", "error")


@dataclass(frozen=True)
class GatewayConfig:
    """Fields with `option(...)` metadata are the flags of `astrai gateway` and `serve`."""

    host: str = field(default="127.0.0.1", metadata=option("HTTP bind address (loopback)"))
    port: int = field(default=8000, metadata=option("HTTP port"))
    worker_bind: str = field(
        default=DEFAULT_WORKER_BIND, metadata=option("ZeroMQ address the workers dial")
    )
    api_key: str | None = field(
        default=None,
        metadata=option("clients must send it (default: $ASTRAI_API_KEY)", env="ASTRAI_API_KEY"),
    )
    max_body_bytes: int = field(
        default=8 * 1024 * 1024, metadata=option("larger request bodies get 413")
    )
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    routing: str = field(
        default="exact",
        metadata=option("how a worker is picked for a request", choices=ROUTING_POLICIES),
    )
    heartbeat_timeout_s: float = field(
        default=3.0,
        metadata=option(
            "a worker silent for longer is dropped", flag="--heartbeat-timeout", metavar="SECONDS"
        ),
    )
    accept_timeout_s: float = 60.0  # a worker that never answers Submit
    # Workers (or restarts of one) a request not yet accepted is submitted to, in turn.
    submit_attempts: int = 4
    max_in_flight: int = field(default=256, metadata=option("requests being served at once"))
    max_queued: int = field(
        default=512, metadata=option("more requests waiting for a turn; beyond: 429 / 529")
    )
    queue_timeout_s: float = field(
        default=30.0,
        metadata=option(
            "a request waiting longer for a turn gets 429 / 529",
            flag="--queue-timeout",
            metavar="SECONDS",
        ),
    )
    drain_timeout_s: float = field(
        default=30.0,
        metadata=option(
            "on SIGTERM, how long running requests may take to finish",
            flag="--drain-timeout",
            metavar="SECONDS",
        ),
    )
    header_timeout_s: float = field(
        default=10.0,
        metadata=option(
            "a client that takes longer to send its request line and headers gets 408",
            flag="--header-timeout",
            metavar="SECONDS",
        ),
    )
    body_timeout_s: float = field(
        default=30.0,
        metadata=option(
            "a client that takes longer to send its request body gets 408",
            flag="--body-timeout",
            metavar="SECONDS",
        ),
    )
    curve_secret_key: str | None = field(
        default=None,
        metadata=option("gateway .key_secret (CURVE): encrypt the worker links"),
    )
    curve_authorized_keys: str | None = field(
        default=None, metadata=option("folder of worker .key files allowed")
    )
    cors_origins: tuple[str, ...] = field(
        default=(),
        metadata=option(
            "let browser pages from ORIGIN (e.g. http://localhost:3000, or *) call the API; "
            "repeatable; CORS is off without it",
            flag="--cors-origin",
            metavar="ORIGIN",
        ),
    )
    console: bool = field(
        default=True,
        metadata=option(
            "do not serve the web console at / (then / is a 404 like any unknown route)",
            flag="--no-console",
        ),
    )

    default_max_tokens: int | None = field(
        default=None,
        metadata=option(
            "a request that sets no token budget (Chat Completions without max_tokens, the "
            "Responses API without max_output_tokens) gets this one, as llama.cpp's "
            "--n-predict; default: until the context ends",
            metavar="N",
        ),
    )
    max_tokens_past_context: str = field(
        default="clamp",
        metadata=option(
            "a max_tokens past what the context leaves after the prompt: clamp cuts it to "
            "that (the answer ends with length / max_tokens), as llama.cpp's server and "
            "Ollama do; error refuses it with 400 context_length_exceeded, as vLLM does "
            "(Anthropic's /v1/messages always cuts)",
            choices=MAX_TOKENS_POLICIES,
        ),
    )
    responses_store_entries: int = field(
        default=1024,
        metadata=option(
            "stored /v1/responses responses kept in memory (store: true, the API's default); "
            "the least recently used go first; 0 stores none",
            metavar="N",
        ),
    )
    model_control: str | None = field(
        default=None,
        metadata=option(
            "the ZeroMQ socket of `astrai serve` that loads and unloads its models (it sets "
            "this for its own gateway)",
            metavar="ADDRESS",
        ),
    )
    responses_store_mb: int = field(
        default=256,
        metadata=option("memory for stored responses, at most", metavar="MB"),
    )

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
        if self.max_tokens_past_context not in MAX_TOKENS_POLICIES:
            raise ValueError(
                f"max_tokens_past_context must be one of {MAX_TOKENS_POLICIES}, "
                f"got {self.max_tokens_past_context!r}"
            )
        if self.default_max_tokens is not None and self.default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be >= 1, got {self.default_max_tokens}")
        for name in ("max_queued", "responses_store_entries", "responses_store_mb"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
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
        if self.model_control is not None and not self.model_control.startswith("tcp://"):
            raise ValueError(f"model_control must be a tcp:// address, got {self.model_control!r}")
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
