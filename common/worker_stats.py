"""WorkerStats: a worker's counters and load, as each Heartbeat carries them; the one list of
worker stat names, read by the engine API, /stats and /metrics alike."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class StatKind(Enum):
    """How /metrics exports a stat; every stat is in /stats either way."""

    COUNTER = "counter"  # cumulative since the worker started
    GAUGE = "gauge"  # as it is now
    DETAIL = "detail"  # /stats only


def stat(help: str, kind: StatKind = StatKind.DETAIL, summed: bool = False) -> Any:
    """A stat's field: `help` documents it in /metrics; `summed`: /stats totals it over
    workers. Returns the default 0 with that metadata (a float field gets 0.0 from
    `float_stat`)."""
    return field(default=0, metadata={"help": help, "kind": kind, "summed": summed})


def float_stat(help: str) -> Any:
    return field(default=0.0, metadata={"help": help, "kind": StatKind.DETAIL, "summed": False})


@dataclass(frozen=True)
class WorkerStats:
    """A worker's figures at one heartbeat. Field names are the keys of /stats's per-worker
    entries (the web console reads them) and, for counters and gauges, of /metrics."""

    total_tasks: int = stat("Requests a worker was given.", StatKind.COUNTER, summed=True)
    total_tokens: int = stat("Tokens a worker generated.", StatKind.COUNTER, summed=True)
    prefill_tokens: int = stat("Prompt tokens a worker computed.", StatKind.COUNTER)
    decode_steps: int = stat("Decode forwards a worker ran.", StatKind.COUNTER)
    preemptions: int = stat("Sequences a worker preempted for pages.", StatKind.COUNTER)
    finished_tasks: int = stat(
        "Choices a worker finished at a stop or their length (not aborted or failed).",
        StatKind.COUNTER,
    )
    active_tasks: int = stat("Choices a worker is running.", StatKind.GAUGE, summed=True)
    waiting_queue: int = stat(
        "Choices waiting for a worker's slots or pages.", StatKind.GAUGE, summed=True
    )
    kv_pages_total: int = stat("A worker's KV cache pages.", StatKind.GAUGE)
    kv_pages_in_use: int = stat("KV pages held by running sequences.", StatKind.GAUGE)
    kv_pages_cached: int = stat("KV pages holding evictable prefix-cache entries.", StatKind.GAUGE)
    kv_pages_free: int = stat("KV pages free.", StatKind.GAUGE)
    kv_page_size: int = stat("Tokens per KV page.")
    kv_bytes_reserved: int = stat("Bytes the KV cache holds.")
    kv_bytes_in_use: int = stat("Bytes of the KV pages in use.")
    kv_bytes_peak_in_use: int = stat("Most bytes of KV pages in use at once.")
    prefix_cache_hit_tokens: int = stat(
        "Prompt tokens a worker read from its prefix cache instead of computing them.",
        StatKind.COUNTER,
    )
    prefix_cache_query_tokens: int = stat(
        "Prompt tokens a worker looked up in its prefix cache.", StatKind.COUNTER
    )
    prefix_cache_disk_hit_tokens: int = stat(
        "Of the prefix-cache hits, prompt tokens read back from the KV disk tier.",
        StatKind.COUNTER,
    )
    kv_disk_bytes: int = stat(
        "Bytes of KV pages in the disk tier's folder, as a worker counts them.", StatKind.GAUGE
    )
    kv_disk_pages_written: int = stat("KV pages a worker wrote to the disk tier.", StatKind.COUNTER)
    kv_disk_pages_dropped: int = stat(
        "KV pages not written to the disk tier (its writer behind, or the tier off).",
        StatKind.COUNTER,
    )
    kv_disk_read_failures: int = stat(
        "KV page files refused (corrupt, truncated or foreign) and computed again.",
        StatKind.COUNTER,
    )
    grammar_compile_seconds: float = float_stat("Time spent compiling grammars.")
    grammar_mask_seconds: float = float_stat("Time spent computing grammar masks.")
    grammar_masked_rows: int = stat("Rows a grammar mask was applied to.")
    dropped_frames: int = stat("Wire frames a worker dropped (its server sets it, not the engine).")
    draft_tokens: int = stat(
        "Tokens a worker drafted from sequences' own text and verified.", StatKind.COUNTER
    )
    accepted_draft_tokens: int = stat("Drafted tokens the model's samples kept.", StatKind.COUNTER)
    gateways: int = stat(
        "Gateways a worker is registered with and hears from (its server sets it).",
        StatKind.GAUGE,
    )
    gateway_failures: int = stat(
        "Gateways a worker lost to silence, dialed without an answer, or could not resolve.",
        StatKind.COUNTER,
    )
    total_embeddings: int = stat(
        "Inputs a worker embedded (/v1/embeddings); their tokens count in prefill_tokens.",
        StatKind.COUNTER,
        summed=True,
    )
    total_rerank_documents: int = stat(
        "Documents a worker scored (/v1/rerank); their tokens count in prefill_tokens.",
        StatKind.COUNTER,
        summed=True,
    )

    def as_dict(self) -> dict[str, int | float]:
        """Every stat by name, in field order: a /stats worker entry's figures."""
        return {name: getattr(self, name) for name in STAT_NAMES}


STAT_NAMES = tuple(f.name for f in dataclasses.fields(WorkerStats))


def stats_of_kind(kind: StatKind) -> tuple[tuple[str, str], ...]:
    """(name, help) of each stat /metrics exports as `kind`, in field order."""
    return tuple(
        (f.name, f.metadata["help"])
        for f in dataclasses.fields(WorkerStats)
        if f.metadata["kind"] is kind
    )


SUMMED_STATS = tuple(f.name for f in dataclasses.fields(WorkerStats) if f.metadata["summed"])
