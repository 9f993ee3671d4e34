"""build_cache: the KV cache an engine's options call for, sized from its memory budget."""

from __future__ import annotations

import torch

from worker.engine.options import EngineOptions
from worker.kv.base import KVCache, KVStorage
from worker.kv.contiguous import ContiguousCache
from worker.kv.paged import PageCache
from worker.model.config import ModelConfig


def build_cache(
    options: EngineOptions,
    config: ModelConfig,
    dtype: torch.dtype,
    device: torch.device,
    context: int,
) -> KVCache:
    """`options.kv_cache_mb` of k/v storage, paged (default) or one slot per sequence."""
    bytes_per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * dtype.itemsize
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
    return PageCache(storage, options.page_size, context, options.enable_prefix_caching)
