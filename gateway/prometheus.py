"""/metrics: the gateway's counters and the workers' last reported figures, exposed through
prometheus-client (its text format, `_total` counters and label escaping, not ours)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from gateway.registry import WorkerRegistry
from gateway.stats import GatewayMetrics, Histogram

# A worker's cumulative figures (stats key → counter name without `_total`) and its gauges.
WORKER_COUNTERS = {
    "total_tasks": ("astrai_worker_tasks", "Requests a worker was given."),
    "finished_tasks": (
        "astrai_worker_finished_tasks",
        "Choices a worker finished at a stop or their length (not aborted or failed).",
    ),
    "total_tokens": ("astrai_worker_tokens", "Tokens a worker generated."),
    "prefill_tokens": ("astrai_worker_prefill_tokens", "Prompt tokens a worker computed."),
    "prefix_cache_hit_tokens": (
        "astrai_worker_prefix_cache_hit_tokens",
        "Prompt tokens a worker read from its prefix cache instead of computing them.",
    ),
    "decode_steps": ("astrai_worker_decode_steps", "Decode forwards a worker ran."),
    "preemptions": ("astrai_worker_preemptions", "Sequences a worker preempted for pages."),
}
WORKER_GAUGES = {
    "active_tasks": "Choices a worker is running.",
    "waiting_queue": "Choices waiting for a worker's slots or pages.",
    "kv_pages_total": "A worker's KV cache pages.",
    "kv_pages_in_use": "KV pages held by running sequences.",
    "kv_pages_cached": "KV pages holding evictable prefix-cache entries.",
    "kv_pages_free": "KV pages free.",
}
CONTENT_TYPE = CONTENT_TYPE_LATEST


def render_prometheus(
    registry: WorkerRegistry, metrics: GatewayMetrics, dropped_frames: Counter[str]
) -> bytes:
    exposition = CollectorRegistry(auto_describe=False)
    exposition.register(_Snapshot(registry, metrics, dropped_frames))
    return generate_latest(exposition)


class _Snapshot(Collector):
    """The figures as they are when /metrics is read (nothing is kept twice)."""

    def __init__(
        self, registry: WorkerRegistry, metrics: GatewayMetrics, dropped_frames: Counter[str]
    ) -> None:
        self.registry, self.metrics, self.dropped_frames = registry, metrics, dropped_frames

    def collect(self) -> Iterator[Metric]:
        metrics = self.metrics
        requests = CounterMetricFamily(
            "astrai_requests",
            "HTTP requests by protocol and status, refusals and failures included.",
            labels=["protocol", "status"],
        )
        for (protocol, status), count in sorted(metrics.requests.items()):
            requests.add_metric([protocol, str(status)], count)
        yield requests
        ttft = "Time from request to first token."
        yield _histogram("astrai_time_to_first_token_seconds", ttft, metrics.ttft_s)
        yield _histogram(
            "astrai_request_latency_seconds", "Time from request to last byte.", metrics.latency_s
        )
        yield CounterMetricFamily(
            "astrai_output_tokens", "Tokens sent to clients.", value=metrics.output_tokens
        )
        yield CounterMetricFamily(
            "astrai_submit_retries",
            "Requests resubmitted after a worker was lost.",
            value=metrics.retries,
        )
        dropped = CounterMetricFamily(
            "astrai_dropped_frames", "Wire frames dropped, by reason.", labels=["reason"]
        )
        for reason, count in sorted(self.dropped_frames.items()):
            dropped.add_metric([reason], count)
        yield dropped
        yield GaugeMetricFamily("astrai_workers", "Live workers.", value=len(self.registry))
        yield from self._workers()

    def _workers(self) -> Iterator[Metric]:
        workers = sorted(self.registry.all(), key=lambda w: w.worker_id)
        labels = ["worker_id", "model"]
        for key, (name, documentation) in WORKER_COUNTERS.items():
            family = CounterMetricFamily(name, documentation, labels=labels)
            for w in workers:
                family.add_metric([w.worker_id, w.model], w.stats.get(key, 0))
            yield family
        for key, documentation in WORKER_GAUGES.items():
            gauge = GaugeMetricFamily(f"astrai_worker_{key}", documentation, labels=labels)
            for w in workers:
                gauge.add_metric([w.worker_id, w.model], w.stats.get(key, 0))
            yield gauge


def _histogram(name: str, documentation: str, histogram: Histogram) -> HistogramMetricFamily:
    buckets, cumulative = [], 0
    for bound, count in zip((*histogram.buckets, float("inf")), histogram.counts, strict=True):
        cumulative += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=histogram.total)
