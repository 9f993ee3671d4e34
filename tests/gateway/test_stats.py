"""/stats: workers' figures summed, and each worker's listed under the keys it always had."""

from dataclasses import replace

from common.worker_stats import SUMMED_STATS, WorkerStats
from gateway.registry import WorkerRegistry
from gateway.stats import aggregate_stats
from tests.common.test_worker_stats import STATS_KEYS
from tests.gateway.test_registry import beat, register


def test_stats_sums_over_workers_and_lists_each_ones_figures():
    registry = WorkerRegistry()
    for worker_id in ("w1", "w0", "w2"):
        register(registry, worker_id)
    registry.heartbeat(beat("w0"), now=0.0)  # WorkerStats(total_tasks=1)
    figures = WorkerStats(
        total_tasks=4, total_tokens=9, active_tasks=2, grammar_mask_seconds=0.5, total_embeddings=3
    )
    registry.heartbeat(replace(beat("w1"), stats=figures), now=0.0)
    stats = aggregate_stats(registry)  # w2 has sent no heartbeat
    assert {key: stats[key] for key in SUMMED_STATS} == {
        "total_tasks": 5,
        "total_tokens": 9,
        "active_tasks": 2,
        "waiting_queue": 0,
        "total_embeddings": 3,
        "total_rerank_documents": 0,
    }
    assert stats["num_workers"] == 3
    w0, w1, w2 = stats["workers"]
    assert (w0["worker_id"], w0["total_tasks"], w0["dropped_frames"]) == ("w0", 1, 0)
    assert {key: w1[key] for key in STATS_KEYS} == figures.as_dict()
    assert w1["grammar_mask_seconds"] == 0.5
    assert w2["worker_id"] == "w2" and "total_tasks" not in w2  # no figures yet: none shown
