"""A prompt chunk's causal attention in two parts: the keys before it unmasked, its own masked.

Why: given the causal mask as a tensor, torch's CPU flash kernel reads a mask value for every
score, and past a few thousand keys it computes at about two thirds of its unmasked rate
(docs/BENCHMARKS.md, "Long prompts and prefill attention"). Every key before the chunk is
seen by all of the chunk's queries, so only the chunk's own keys need a mask: the two parts
are attended apart and merged by their log-sum-exps (the same algebra as shared_prefix.py).
"""

from __future__ import annotations

import torch

# The fewest keys before a chunk for which it is attended in two parts. Below it the mask costs
# little (1.04x at 1,024 keys, docs/BENCHMARKS.md), and a short prompt keeps the rounding it
# had: a near-tie of its greedy answer, computed again from the prefix cache in one masked
# attention, breaks the same way as before.
MIN_PREFIX_KEYS = 512


def attend_after_prefix(
    queries: torch.Tensor,  # (KVH, Q*G, D): row q*G + g, the queries of the last Q keys
    keys: torch.Tensor,  # (T, KVH, D), T > Q: the sequence's keys up to the chunk's last
    values: torch.Tensor,
    group: int,
) -> torch.Tensor:
    """(KVH, Q*G, D): row q*G + g attends keys 0 .. T - Q + q, as a causal mask says."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    rows, total = queries.shape[1], keys.shape[0]
    own = rows // group
    prefix = total - own
    k, v = keys.transpose(0, 1)[None], values.transpose(0, 1)[None]  # (1, KVH, T, D) views
    query_of_row = torch.arange(rows, device=queries.device) // group
    visible = torch.arange(own, device=queries.device)[None, :] <= query_of_row[:, None]
    mask = torch.where(visible, 0.0, -torch.inf).to(queries.dtype)[None, None]
    before, before_lse = flash(queries[None], k[:, :, :prefix], v[:, :, :prefix])
    within, within_lse = flash(queries[None], k[:, :, prefix:], v[:, :, prefix:], attn_mask=mask)
    top = torch.maximum(before_lse, within_lse)
    w_before = torch.exp(before_lse - top)[..., None]
    w_within = torch.exp(within_lse - top)[..., None]
    merged: torch.Tensor = (before * w_before + within * w_within) / (w_before + w_within)
    return merged[0]
