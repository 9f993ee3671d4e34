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

from common.worker_stats import StatKind, WorkerStats, stats_of_kind
from gateway.registry import WorkerRegistry, WorkerState
from gateway.stats import GatewayMetrics, Histogram

# A worker's cumulative stats are counters named without `total_` (and, as prometheus-client
# writes them, with `_total`): total_tokens is astrai_worker_tokens_total. Gauges keep their
# names: astrai_worker_kv_pages_free.
WORKER_COUNTERS = stats_of_kind(StatKind.COUNTER)
WORKER_GAUGES = stats_of_kind(StatKind.GAUGE)
NO_STATS = WorkerStats()  # a worker's figures before a heartbeat carries them: zeros
CONTENT_TYPE = CONTENT_TYPE_LATEST


def render_prometheus(
    registry: WorkerRegistry,
    metrics: GatewayMetrics,
    dropped_frames: Counter[str],
    models: Collector | None = None,
) -> bytes:
    """The text; `models`: `astrai serve`'s model states (gateway/model_metrics.py)."""
    exposition = CollectorRegistry(auto_describe=False)
    exposition.register(_Snapshot(registry, metrics, dropped_frames))
    if models is not None:
        exposition.register(models)
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
        yield GaugeMetricFamily(
            "astrai_workers", "Workers registered with this gateway.", value=len(self.registry)
        )
        yield from self._workers()

    def _workers(self) -> Iterator[Metric]:
        workers = sorted(self.registry.all(), key=lambda w: w.worker_id)
        labels = ["worker_id", "model"]
        for key, documentation in WORKER_COUNTERS:
            name = f"astrai_worker_{key.removeprefix('total_')}"
            family = CounterMetricFamily(name, documentation, labels=labels)
            for w in workers:
                family.add_metric([w.worker_id, w.model], _stat(w, key))
            yield family
        for key, documentation in WORKER_GAUGES:
            gauge = GaugeMetricFamily(f"astrai_worker_{key}", documentation, labels=labels)
            for w in workers:
                gauge.add_metric([w.worker_id, w.model], _stat(w, key))
            yield gauge
        yield from _vllm_gauges(workers)
        yield from _vllm_prefix_cache(workers)


# vLLM's names for the figures Kubernetes' serving stack routes and scales on (the Gateway
# API Inference Extension's endpoint picker, KEDA/HPA examples): the same numbers as ours,
# per worker, labelled with the served model as vLLM labels them.
VLLM_GAUGES = (
    ("vllm:num_requests_running", "Requests running on a worker (astrai_worker_active_tasks)."),
    ("vllm:num_requests_waiting", "Requests waiting on a worker (astrai_worker_waiting_queue)."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage of a worker, 1 = all pages held by requests."),
)


def _vllm_gauges(workers: list[WorkerState]) -> Iterator[Metric]:
    values = {
        "vllm:num_requests_running": lambda w: _stat(w, "active_tasks"),
        "vllm:num_requests_waiting": lambda w: _stat(w, "waiting_queue"),
        "vllm:kv_cache_usage_perc": _kv_usage,
    }
    for name, documentation in VLLM_GAUGES:
        gauge = GaugeMetricFamily(name, documentation, labels=["model_name", "worker_id"])
        for w in workers:
            gauge.add_metric([w.model, w.worker_id], values[name](w))
        yield gauge


def _vllm_prefix_cache(workers: list[WorkerState]) -> Iterator[Metric]:
    """vLLM's prefix-cache counters, in tokens; the hits by the tier they came from."""
    labels = ["model_name", "worker_id"]
    queries = CounterMetricFamily(
        "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", labels=labels
    )
    hits = CounterMetricFamily(
        "vllm:prefix_cache_hits",
        "Prompt tokens found in the prefix cache, by tier (memory, or read back from disk).",
        labels=[*labels, "tier"],
    )
    for w in workers:
        queries.add_metric([w.model, w.worker_id], _stat(w, "prefix_cache_query_tokens"))
        from_disk = _stat(w, "prefix_cache_disk_hit_tokens")
        in_memory = _stat(w, "prefix_cache_hit_tokens") - from_disk
        hits.add_metric([w.model, w.worker_id, "memory"], in_memory)
        hits.add_metric([w.model, w.worker_id, "disk"], from_disk)
    yield queries
    yield hits


def _kv_usage(worker: WorkerState) -> float:
    total = _stat(worker, "kv_pages_total")
    return _stat(worker, "kv_pages_in_use") / total if total else 0.0


def _stat(worker: WorkerState, name: str) -> float:
    value: float = getattr(worker.stats or NO_STATS, name)
    return value


def _histogram(name: str, documentation: str, histogram: Histogram) -> HistogramMetricFamily:
    buckets, cumulative = [], 0
    for bound, count in zip((*histogram.buckets, float("inf")), histogram.counts, strict=True):
        cumulative += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=histogram.total)
