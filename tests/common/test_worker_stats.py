"""WorkerStats: the one list of a worker's figures, whose names /stats and /metrics expose."""

from common.worker_stats import STAT_NAMES, SUMMED_STATS, StatKind, WorkerStats, stats_of_kind

# The keys of a /stats worker entry before the stats were typed: the web console and the
# benchmarks read them, so they may only grow.
STATS_KEYS = (
    "total_tasks",
    "total_tokens",
    "prefill_tokens",
    "decode_steps",
    "preemptions",
    "finished_tasks",
    "active_tasks",
    "waiting_queue",
    "kv_pages_total",
    "kv_pages_in_use",
    "kv_pages_cached",
    "kv_pages_free",
    "kv_page_size",
    "kv_bytes_reserved",
    "kv_bytes_in_use",
    "kv_bytes_peak_in_use",
    "prefix_cache_hit_tokens",
    "prefix_cache_query_tokens",
    "prefix_cache_disk_hit_tokens",
    "kv_disk_bytes",
    "kv_disk_pages_written",
    "kv_disk_pages_dropped",
    "kv_disk_read_failures",
    "grammar_compile_seconds",
    "grammar_mask_seconds",
    "grammar_masked_rows",
    "dropped_frames",
    "draft_tokens",
    "accepted_draft_tokens",
    "gateways",
    "gateway_failures",
    "total_embeddings",
    "total_rerank_documents",
)


def test_the_stat_names_are_the_keys_stats_has_always_had():
    assert STAT_NAMES == STATS_KEYS
    assert list(WorkerStats().as_dict()) == list(STATS_KEYS)


def test_what_metrics_exports_and_what_stats_totals():
    assert [name for name, _ in stats_of_kind(StatKind.COUNTER)] == [
        "total_tasks",
        "total_tokens",
        "prefill_tokens",
        "decode_steps",
        "preemptions",
        "finished_tasks",
        "prefix_cache_hit_tokens",
        "prefix_cache_query_tokens",
        "prefix_cache_disk_hit_tokens",
        "kv_disk_pages_written",
        "kv_disk_pages_dropped",
        "kv_disk_read_failures",
        "draft_tokens",
        "accepted_draft_tokens",
        "gateway_failures",
        "total_embeddings",
        "total_rerank_documents",
    ]
    assert [name for name, _ in stats_of_kind(StatKind.GAUGE)] == [
        "active_tasks",
        "waiting_queue",
        "kv_pages_total",
        "kv_pages_in_use",
        "kv_pages_cached",
        "kv_pages_free",
        "kv_disk_bytes",
        "gateways",
    ]
    assert SUMMED_STATS == (
        "total_tasks",
        "total_tokens",
        "active_tasks",
        "waiting_queue",
        "total_embeddings",
        "total_rerank_documents",
    )
    assert all(help_text for _, help_text in stats_of_kind(StatKind.COUNTER))
