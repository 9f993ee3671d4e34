"""What a worker tells each gateway of itself: its Register and Heartbeat, from its figures."""

from __future__ import annotations

import os
import socket

from common.schemas import Heartbeat, Register
from common.worker_stats import WorkerStats
from worker.engine.inference_engine import InferenceEngine


def register_message(
    engine: InferenceEngine,
    worker_id: str,
    incarnation: str,
    stats: WorkerStats,
    kv_addresses: tuple[str, str] = ("", ""),  # KV events, replay (docs/KV_EVENTS.md)
) -> Register:
    return Register(
        worker_id=worker_id,
        incarnation=incarnation,
        model=engine.model_name,
        aliases=engine.model_aliases,
        max_context=engine.max_model_len,
        max_seqs=engine.options.max_seqs,
        kv_pages=stats.kv_pages_total,
        page_size=stats.kv_page_size,
        pid=os.getpid(),
        host=socket.gethostname(),
        kv_events=kv_addresses[0],
        kv_replay=kv_addresses[1],
        kernels=engine.kernels,
    )


def heartbeat_message(
    worker_id: str, incarnation: str, stats: WorkerStats, draining: bool, kv_events_seq: int = -1
) -> Heartbeat:
    return Heartbeat(
        worker_id=worker_id,
        incarnation=incarnation,
        waiting=stats.waiting_queue,
        running=stats.active_tasks,
        kv_pages_free=stats.kv_pages_free + stats.kv_pages_cached,
        kv_pages_total=stats.kv_pages_total,
        prefix_cache_hit_tokens=stats.prefix_cache_hit_tokens,
        stats=stats,
        draining=draining,
        kv_events_seq=kv_events_seq,
    )
