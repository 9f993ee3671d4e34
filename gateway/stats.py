"""Gateway statistics: the gateway's own counters, and /stats aggregated over workers."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from common.worker_stats import SUMMED_STATS
from gateway.registry import WorkerRegistry

LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class Histogram:
    buckets: tuple[float, ...] = LATENCY_BUCKETS_S
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1


@dataclass
class GatewayMetrics:
    requests: Counter[tuple[str, int]] = field(default_factory=Counter)  # (protocol, status)
    ttft_s: Histogram = field(default_factory=Histogram)
    latency_s: Histogram = field(default_factory=Histogram)
    output_tokens: int = 0
    retries: int = 0

    def observe(
        self, protocol: str, status: int, latency_s: float, ttft_s: float | None, tokens: int
    ) -> None:
        self.requests[(protocol, status)] += 1
        self.latency_s.observe(latency_s)
        if ttft_s is not None:
            self.ttft_s.observe(ttft_s)
        self.output_tokens += tokens


def aggregate_stats(registry: WorkerRegistry) -> dict[str, Any]:
    """Engine stats summed over live workers, plus one entry per worker."""
    workers = sorted(registry.all(), key=lambda w: w.worker_id)
    reported = [w.stats for w in workers if w.stats is not None]
    totals = {name: sum(getattr(stats, name) for stats in reported) for name in SUMMED_STATS}
    return {
        **totals,
        "num_workers": len(workers),
        "workers": [
            {
                "worker_id": w.worker_id,
                "pid": w.pid,
                "host": w.host,
                "model": w.model,
                "incarnation": w.incarnation,
                "draining": w.draining,
                "in_flight": len(w.in_flight),
                "kv_events": w.kv_events,  # its KV-event addresses (docs/KV_EVENTS.md)
                "kv_replay": w.kv_replay,
                "kernels": w.kernels,  # the CPU, the plan and each weight type's kernel
                **(w.stats.as_dict() if w.stats is not None else {}),
            }
            for w in workers
        ],
    }
