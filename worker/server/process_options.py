"""WorkerProcessOptions: what a worker process takes besides its engine options and its link."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.cli_options import option


@dataclass(frozen=True)
class WorkerProcessOptions:
    model: str | None = field(
        default=None, metadata=option("HF folder or .gguf (default: SmolLM2-135M)")
    )
    health_port: int | None = field(
        default=None, metadata=option("serve /live and /ready for probes")
    )
