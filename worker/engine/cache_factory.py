"""build_cache: the KV cache an engine's options call for, sized from its memory budget."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch

from worker.engine.options import EngineOptions
from worker.kv.base import KVCache, KVStorage
from worker.kv.contiguous import ContiguousCache
from worker.kv.disk_tier import DiskTier
from worker.kv.kv_rows import storage_width
from worker.kv.paged import PageCache
from worker.machine.paths import cache_root
from worker.model.config import ModelConfig

KV_DISK_DIR_ENV = "ASTRAI_KV_DISK_DIR"  # the disk tier's folder where no option names one


def build_cache(
    options: EngineOptions,
    config: ModelConfig,
    dtype: torch.dtype,
    device: torch.device,
    context: int,
    disk_identity: Callable[[], str] | None = None,
) -> KVCache:
    """`options.kv_cache_mb` of k/v storage, paged (default) or one slot per sequence; a
    paged cache with prefix caching gets the disk tier `options.kv_disk_*` ask for, its
    pages named by `disk_identity()` (the model and every setting that changes the rows)."""
    row_bytes = storage_width(config.head_dim, dtype) * dtype.itemsize
    bytes_per_token = 2 * config.num_layers * config.num_kv_heads * row_bytes
    budget_tokens = options.kv_cache_mb * (1 << 20) // bytes_per_token
    if options.max_model_len is not None:
        # A context asked for by name is a promise: the cache holds one sequence that long,
        # whatever kv_cache_mb says (the startup line reports the size taken).
        budget_tokens = max(budget_tokens, -(-context // options.page_size) * options.page_size)
    shape = (config.num_layers, config.num_kv_heads, config.head_dim)
    if options.kv_cache == "contiguous":
        num_slots = min(options.max_seqs, budget_tokens // context)
        if num_slots < 1:
            raise ValueError(
                f"kv_cache_mb {options.kv_cache_mb} cannot hold one sequence of {context} "
                "tokens; raise kv_cache_mb or lower max_model_len"
            )
        storage = KVStorage(shape[0], num_slots, context, *shape[1:], dtype, device)
        return ContiguousCache(storage)
    num_pages = budget_tokens // options.page_size
    if num_pages < 2:
        raise ValueError(f"kv_cache_mb {options.kv_cache_mb} holds fewer than 2 pages")
    storage = KVStorage(shape[0], num_pages, options.page_size, *shape[1:], dtype, device)
    disk = None
    if options.kv_disk_mb and options.enable_prefix_caching and disk_identity is not None:
        folder = Path(options.kv_disk_dir or os.environ.get(KV_DISK_DIR_ENV) or cache_root() / "kv")
        page_bytes = bytes_per_token * options.page_size
        # A step's prompt tokens span their pages and, unaligned, one more.
        step_tokens = max(options.prefill_token_budget, options.idle_prefill_token_budget)
        step_pages = -(-step_tokens // options.page_size) + 1
        budget = options.kv_disk_mb << 20
        disk = DiskTier.open(folder, disk_identity(), page_bytes, budget, step_pages)
    return PageCache(storage, options.page_size, context, options.enable_prefix_caching, disk=disk)
