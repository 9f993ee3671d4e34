"""Attention whose scores are soft-capped before the softmax (Gemma 2): cap * tanh(s / cap).

Why a path of its own: SDPA computes softmax(q·k) in one fused kernel and takes no function
of the scores, so a capped layer gathers its keys and values and runs the arithmetic of
transformers' eager attention over the batch's padded (B, Q*G, T) layout, in float32.
"""

from __future__ import annotations

from typing import Protocol

import torch

from worker.kv.kv_rows import read_rows
from worker.model.batch import ForwardBatch


class _Heads(Protocol):
    num_heads: int
    num_kv_heads: int
    head_dim: int
    group: int
    softcap: float | None


def soft_capped_attention(
    q: torch.Tensor,  # (N, H, D), RoPE applied (and scaled, where the model scales queries)
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    batch: ForwardBatch,
    mask: torch.Tensor,  # (B, 1, Q*G, T) or (B, 1, 1, T) bool, True = may attend
    heads: _Heads,
) -> torch.Tensor:
    """(N, H * D) in q's dtype."""
    assert heads.softcap is not None
    b, qlen = batch.num_seqs, batch.max_query_len
    d, kvh, g = heads.head_dim, heads.num_kv_heads, heads.group
    shape = (b, batch.read_slots.shape[1], kvh, d)
    rows = batch.read_slots.reshape(-1)
    keys = read_rows(k_cache, rows).view(shape).float().transpose(1, 2)  # (B, KVH, T, D)
    values = read_rows(v_cache, rows).view(shape).float().transpose(1, 2)
    if batch.query_index is None:  # one query per sequence: N == B
        grouped = q.float().view(b, kvh, g, d)  # (B, KVH, G, D)
    else:
        padded = q.new_zeros(b * qlen, heads.num_heads, d, dtype=torch.float32)
        padded.index_copy_(0, batch.query_index, q.float())
        grouped = padded.view(b, qlen, kvh, g, d).transpose(1, 2).reshape(b, kvh, qlen * g, d)
    scores = grouped @ keys.transpose(-1, -2) * d**-0.5  # (B, KVH, Q*G, T)
    scores = torch.tanh(scores / heads.softcap) * heads.softcap
    # Padded query rows see nothing and come out NaN; they are never selected below.
    scores = scores.masked_fill(~mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ values  # (B, KVH, Q*G, D)
    if batch.query_index is None:
        return out.reshape(b, heads.num_heads * d).to(q.dtype)
    out = out.view(b, kvh, qlen, g, d).transpose(1, 2).reshape(b * qlen, heads.num_heads * d)
    return out.index_select(0, batch.query_index).to(q.dtype)
