"""ServeOptions: what `astrai serve` itself decides, beyond its gateway's and workers' options."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from common.cli_options import option

# Of the machine's memory, the share the models' workers may use together by default: the
# rest is the gateway's, the page cache's and the system's.
DEFAULT_BUDGET_SHARE = 0.8


def machine_memory_mb() -> int:
    """The machine's memory in MiB (as /proc/meminfo's MemTotal states it)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


@dataclass(frozen=True)
class ServeOptions:
    workers: int = field(default=1, metadata=option("local worker processes (of each model)"))
    worker_bind: str | None = field(
        default=None, metadata=option("worker socket (default: a free loopback port)")
    )
    startup_timeout_s: float = field(
        default=600.0,
        metadata=option(
            "give up if the workers have not registered by then (a model loaded on demand "
            "too: its waiting requests then get 503)",
            flag="--startup-timeout",
            metavar="SECONDS",
        ),
    )
    models: tuple[str, ...] = field(
        default=(),
        metadata=option(
            "HF folder or .gguf (default, or the word `default`: the embedded SmolLM2-135M); "
            "repeat it (or give several) to serve several models: the first loads at start, "
            "each other one on its first request",
            flag="--model",
            metavar="PATH",
        ),
    )
    models_dir: str | None = field(
        default=None,
        metadata=option("serve every .gguf file and model folder in DIR", metavar="DIR"),
    )
    models_file: str | None = field(
        default=None,
        metadata=option(
            "a TOML file of models, each with its own options, ttl, pinned and preload "
            "(docs/MODELS.md)",
            flag="--models",
            metavar="FILE.toml",
        ),
    )
    model_ttl_s: float | None = field(
        default=None,
        metadata=option(
            "unload a model after this long without a request (default: never; a --models "
            "file's ttl wins)",
            flag="--model-ttl",
            metavar="SECONDS",
        ),
    )
    memory_budget_mb: int | None = field(
        default=None,
        metadata=option(
            "the models' workers together use at most this much memory: the least recently "
            "used are unloaded to make room (default: four fifths of the machine's)",
            metavar="MB",
        ),
    )

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.model_ttl_s is not None and self.model_ttl_s <= 0:
            raise ValueError(f"--model-ttl must be > 0, got {self.model_ttl_s}")
        if self.memory_budget_mb is not None and self.memory_budget_mb < 1:
            raise ValueError(f"--memory-budget-mb must be >= 1, got {self.memory_budget_mb}")

    def budget_mb(self) -> int:
        if self.memory_budget_mb is not None:
            return self.memory_budget_mb
        return int(machine_memory_mb() * DEFAULT_BUDGET_SHARE)
