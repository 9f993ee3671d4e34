"""/metrics in Prometheus' format: read back by its parser, counters as `_total`, labels escaped."""

from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from common.schemas import Heartbeat, Register
from common.worker_stats import WorkerStats
from gateway.prometheus import render_prometheus
from gateway.registry import WorkerRegistry
from gateway.stats import GatewayMetrics

ODD_ID = 'w"1\\\nx'  # a quote, a backslash and a newline: each must be escaped


def families(text: bytes) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


def registry_with_a_worker() -> WorkerRegistry:
    registry = WorkerRegistry()
    registry.register(b"id", Register(ODD_ID, "inc", "m", 1024, 8, 100, 16, 1, "host"), 0.0)
    stats = WorkerStats(total_tokens=42, decode_steps=7, kv_pages_in_use=3, kv_pages_free=97)
    assert registry.heartbeat(Heartbeat(ODD_ID, "inc", 0, 1, 97, 100, 5, stats), 0.0)
    return registry


def test_exposition_parses_with_counters_gauges_and_histograms_typed():
    metrics = GatewayMetrics()
    metrics.observe("openai", 200, 0.3, 0.05, 10)
    metrics.observe("anthropic", 529, 0.0, None, 0)
    parsed = families(render_prometheus(registry_with_a_worker(), metrics, Counter(bad=2)))
    # The parser names counters without `_total`; their samples carry it.
    assert parsed["astrai_requests"].type == "counter"
    samples = {
        (s.labels["protocol"], s.labels["status"]): s.value
        for s in parsed["astrai_requests"].samples
    }
    assert samples == {("openai", "200"): 1, ("anthropic", "529"): 1}
    assert all(s.name == "astrai_requests_total" for s in parsed["astrai_requests"].samples)
    assert parsed["astrai_time_to_first_token_seconds"].type == "histogram"
    assert parsed["astrai_worker_tokens"].type == "counter"  # cumulative: not a gauge
    assert parsed["astrai_worker_kv_pages_in_use"].type == "gauge"
    assert parsed["astrai_dropped_frames"].samples[0].value == 2


def test_label_values_are_escaped_and_read_back_intact():
    parsed = families(render_prometheus(registry_with_a_worker(), GatewayMetrics(), Counter()))
    [tokens] = parsed["astrai_worker_tokens"].samples
    assert tokens.labels == {"worker_id": ODD_ID, "model": "m"}
    assert tokens.value == 42
    [steps] = parsed["astrai_worker_decode_steps"].samples
    assert steps.name == "astrai_worker_decode_steps_total" and steps.value == 7


def test_every_worker_figure_keeps_its_metric_name():
    parsed = families(render_prometheus(registry_with_a_worker(), GatewayMetrics(), Counter()))
    worker = {name: f.type for name, f in parsed.items() if name.startswith("astrai_worker_")}
    assert worker == {
        "astrai_worker_tasks": "counter",
        "astrai_worker_finished_tasks": "counter",
        "astrai_worker_tokens": "counter",
        "astrai_worker_prefill_tokens": "counter",
        "astrai_worker_prefix_cache_hit_tokens": "counter",
        "astrai_worker_prefix_cache_query_tokens": "counter",
        "astrai_worker_prefix_cache_disk_hit_tokens": "counter",
        "astrai_worker_kv_disk_bytes": "gauge",
        "astrai_worker_kv_disk_pages_written": "counter",
        "astrai_worker_kv_disk_pages_dropped": "counter",
        "astrai_worker_kv_disk_read_failures": "counter",
        "astrai_worker_draft_tokens": "counter",
        "astrai_worker_accepted_draft_tokens": "counter",
        "astrai_worker_decode_steps": "counter",
        "astrai_worker_preemptions": "counter",
        "astrai_worker_active_tasks": "gauge",
        "astrai_worker_waiting_queue": "gauge",
        "astrai_worker_kv_pages_total": "gauge",
        "astrai_worker_kv_pages_in_use": "gauge",
        "astrai_worker_kv_pages_cached": "gauge",
        "astrai_worker_kv_pages_free": "gauge",
        "astrai_worker_gateways": "gauge",
        "astrai_worker_gateway_failures": "counter",
        "astrai_worker_embeddings": "counter",
        "astrai_worker_rerank_documents": "counter",
    }


def test_a_worker_without_figures_yet_shows_zeros():
    registry = WorkerRegistry()
    registry.register(b"id", Register("w0", "inc", "m", 1024, 8, 100, 16, 1, "host"), 0.0)
    parsed = families(render_prometheus(registry, GatewayMetrics(), Counter()))
    [tokens] = parsed["astrai_worker_tokens"].samples
    [free] = parsed["astrai_worker_kv_pages_free"].samples
    assert (tokens.value, free.value) == (0, 0)


def test_vllm_prefix_cache_counters_split_the_hits_by_tier():
    registry = WorkerRegistry()
    registry.register(b"id", Register("w1", "inc", "m", 1024, 8, 100, 16, 1, "host"), 0.0)
    stats = WorkerStats(
        prefix_cache_query_tokens=1000,
        prefix_cache_hit_tokens=600,
        prefix_cache_disk_hit_tokens=400,
    )
    assert registry.heartbeat(Heartbeat("w1", "inc", 0, 0, 75, 100, 600, stats), 0.0)
    parsed = families(render_prometheus(registry, GatewayMetrics(), Counter()))
    [queries] = [
        s for s in parsed["vllm:prefix_cache_queries"].samples if s.name.endswith("_total")
    ]
    assert (queries.labels, queries.value) == ({"model_name": "m", "worker_id": "w1"}, 1000)
    hits = {
        s.labels["tier"]: s.value
        for s in parsed["vllm:prefix_cache_hits"].samples
        if s.name.endswith("_total")
    }
    assert hits == {"memory": 200, "disk": 400}


def test_vllm_compatibility_gauges_carry_the_workers_figures():
    registry = WorkerRegistry()
    registry.register(b"id", Register("w1", "inc", "m", 1024, 8, 100, 16, 1, "host"), 0.0)
    stats = WorkerStats(active_tasks=3, waiting_queue=2, kv_pages_total=100, kv_pages_in_use=25)
    assert registry.heartbeat(Heartbeat("w1", "inc", 0, 3, 75, 100, 5, stats), 0.0)

    parsed = families(render_prometheus(registry, GatewayMetrics(), Counter()))

    def value(name: str) -> float:
        [sample] = parsed[name].samples
        assert sample.labels == {"model_name": "m", "worker_id": "w1"}
        assert parsed[name].type == "gauge"
        return sample.value

    assert value("vllm:num_requests_running") == 3
    assert value("vllm:num_requests_waiting") == 2
    assert value("vllm:kv_cache_usage_perc") == 0.25


def test_a_worker_without_stats_yet_reports_zero_usage_not_a_division_error():
    registry = WorkerRegistry()
    registry.register(b"id", Register("w1", "inc", "m", 1024, 8, 100, 16, 1, "host"), 0.0)
    parsed = families(render_prometheus(registry, GatewayMetrics(), Counter()))
    assert [s.value for s in parsed["vllm:kv_cache_usage_perc"].samples] == [0.0]
