"""ServeOptions: what `astrai serve` itself decides, beyond its gateway's and workers' options."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.cli_options import option


@dataclass(frozen=True)
class ServeOptions:
    workers: int = field(default=1, metadata=option("local worker processes"))
    worker_bind: str | None = field(
        default=None, metadata=option("worker socket (default: a free loopback port)")
    )
    startup_timeout_s: float = field(
        default=600.0,
        metadata=option(
            "give up if the workers have not registered by then",
            flag="--startup-timeout",
            metavar="SECONDS",
        ),
    )

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
