"""Gateway statistics: /stats aggregated over workers, and /metrics as Prometheus text."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gateway.registry import WorkerRegistry

SUMMED_STATS = ("total_tasks", "total_tokens", "active_tasks", "waiting_queue")
WORKER_GAUGES = (
    "active_tasks",
    "waiting_queue",
    "kv_pages_total",
    "kv_pages_in_use",
    "kv_pages_cached",
    "prefix_cache_hit_tokens",
    "total_tokens",
    "prefill_tokens",
    "decode_steps",
    "preemptions",
)
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

    def render(self, name: str) -> list[str]:
        lines = []
        cumulative = 0
        for bound, count in zip((*self.buckets, float("inf")), self.counts, strict=True):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(f'{name}_bucket{{le="{le}"}} {cumulative}')
        lines.append(f"{name}_sum {self.total}")
        lines.append(f"{name}_count {self.count}")
        return lines


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
    totals = {key: sum(int(w.stats.get(key, 0)) for w in workers) for key in SUMMED_STATS}
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
                **w.stats,
            }
            for w in workers
        ],
    }


def render_prometheus(
    registry: WorkerRegistry, metrics: GatewayMetrics, dropped_frames: Counter[str]
) -> str:
    lines = [
        "# HELP astrai_requests_total HTTP requests by protocol and status.",
        "# TYPE astrai_requests_total counter",
    ]
    for (protocol, status), count in sorted(metrics.requests.items()):
        lines.append(f'astrai_requests_total{{protocol="{protocol}",status="{status}"}} {count}')
    lines += [
        "# HELP astrai_time_to_first_token_seconds Time from request to first token.",
        "# TYPE astrai_time_to_first_token_seconds histogram",
        *metrics.ttft_s.render("astrai_time_to_first_token_seconds"),
        "# HELP astrai_request_latency_seconds Time from request to last byte.",
        "# TYPE astrai_request_latency_seconds histogram",
        *metrics.latency_s.render("astrai_request_latency_seconds"),
        "# HELP astrai_output_tokens_total Tokens sent to clients.",
        "# TYPE astrai_output_tokens_total counter",
        f"astrai_output_tokens_total {metrics.output_tokens}",
        "# HELP astrai_submit_retries_total Requests resubmitted after a worker was lost.",
        "# TYPE astrai_submit_retries_total counter",
        f"astrai_submit_retries_total {metrics.retries}",
        "# HELP astrai_dropped_frames_total Wire frames dropped by reason.",
        "# TYPE astrai_dropped_frames_total counter",
    ]
    for reason, count in sorted(dropped_frames.items()):
        lines.append(f'astrai_dropped_frames_total{{reason="{reason}"}} {count}')
    lines += [
        "# HELP astrai_workers Live workers.",
        "# TYPE astrai_workers gauge",
        f"astrai_workers {len(registry)}",
    ]
    for key in WORKER_GAUGES:
        lines.append(f"# TYPE astrai_worker_{key} gauge")
        for w in sorted(registry.all(), key=lambda w: w.worker_id):
            labels = f'worker_id="{w.worker_id}",model="{w.model}"'
            lines.append(f"astrai_worker_{key}{{{labels}}} {int(w.stats.get(key, 0))}")
    return "\n".join(lines) + "\n"
