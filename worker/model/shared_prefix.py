"""Chunks whose contexts begin with the same cached rows: that part of attention once.

Why: requests that share a system prompt are prefilled together, each tail a short chunk
attending over the whole shared prompt. Sequence by sequence, every tail gathers the shared
rows' keys and values again and runs its own small attention over them. All the tails'
queries against the shared rows in one attention (the rows gathered once), and the tails' own
rows in one more, padded to the longest, merged by their log-sum-exps, cost less
(docs/BENCHMARKS.md, Figures behind the code). With AVX-512 and a float32 cache, one native
kernel does both parts, reading the cache's rows in place (attend_shared_in_place).
The merge is exact up to float rounding: softmax over the union of two key sets is the two
partial softmaxes weighted by their normalisers. Decoding rows riding in the same forward (one
query each) form a group of their own, so none is padded to a tail's length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from worker.kv.kv_rows import head_dim_of, read_rows

# Fewer shared rows than this: the merge costs more than gathering them again saves.
MIN_SHARED_ROWS = 64
# Longer chunks attend alone: their own rows dominate, and padding the short tails to them
# would cost more than the shared rows save.
MAX_GROUPED_QUERY = 64


@dataclass(frozen=True)
class SharedPrefix:
    """Sequences of one forward whose contexts start with the same `length` cache rows, all
    before any of their queries (so every query sees every one of them); S sequences, N
    query tokens, at most Q per sequence and O rows of their own."""

    seqs: tuple[int, ...]  # batch indices, ascending
    length: int
    query_rows: torch.Tensor  # (N,) int64: the packed rows of their queries, in order
    padded_rows: torch.Tensor  # (N,) int64: each query's row in the (S * Q) padded layout
    own_slots: torch.Tensor  # (S, O) int64: cache rows of each one's own context, padded
    # (S, 1, Q*G, O) float32, 0 = may attend, -inf = may not (the attention kernel that
    # returns log-sum-exps takes no bool mask); padded query rows see their first own row.
    own_mask: torch.Tensor
    query_counts: torch.Tensor  # (S,) int64: each one's queries, the last of its own rows
    own_counts: torch.Tensor  # (S,) int64: each one's own rows (of own_slots' O)


def find_shared_prefixes(
    read_slots: torch.Tensor,  # (B, T) int64
    starts: list[int],  # first query position of each sequence
    mask: torch.Tensor,  # (B, Q*G, T) bool, as ForwardBatch's without its head axis
    query_lengths: list[int],
    group_size: int,
) -> tuple[SharedPrefix, ...]:
    """Groups of two or more sequences sharing at least MIN_SHARED_ROWS leading rows.

    Candidates sharing their first row (and whether they feed one token) are one group; its
    shared length is where the first of them departs, and at most the earliest query's
    position.
    """
    candidates: dict[tuple[int, bool], list[int]] = {}
    for i, (start, qlen) in enumerate(zip(starts, query_lengths, strict=True)):
        if start >= MIN_SHARED_ROWS and qlen <= MAX_GROUPED_QUERY:
            candidates.setdefault((int(read_slots[i, 0]), qlen == 1), []).append(i)
    offsets = [0]
    for qlen in query_lengths:
        offsets.append(offsets[-1] + qlen)
    groups = []
    for seqs in candidates.values():
        if len(seqs) < 2:
            continue
        limit = min(starts[i] for i in seqs)
        rows = read_slots[seqs, :limit]
        same = (rows == rows[:1]).all(0)
        length = int(same.cumprod(0).sum())
        if length >= MIN_SHARED_ROWS:
            groups.append(
                _group(seqs, length, read_slots, starts, mask, query_lengths, offsets, group_size)
            )
    return tuple(sorted(groups, key=lambda group: group.seqs))


def _group(
    seqs: list[int],
    length: int,
    read_slots: torch.Tensor,
    starts: list[int],
    mask: torch.Tensor,
    query_lengths: list[int],
    offsets: list[int],
    group_size: int,
) -> SharedPrefix:
    qmax = max(query_lengths[i] for i in seqs)
    omax = max(starts[i] + query_lengths[i] - length for i in seqs)
    own_slots = torch.empty(len(seqs), omax, dtype=torch.int64)
    own_mask = torch.full((len(seqs), 1, qmax * group_size, omax), -torch.inf)
    own_mask[:, :, :, 0] = 0.0  # padded query rows: a row to attend to, dropped after
    query_rows, padded_rows, own_counts = [], [], []
    for s, i in enumerate(seqs):
        qlen, own = query_lengths[i], starts[i] + query_lengths[i] - length
        own_counts.append(own)
        own_slots[s, :own] = read_slots[i, length : length + own]
        own_slots[s, own:] = read_slots[i, length]  # padding: masked off
        allowed = mask[i, : qlen * group_size, length : length + own]
        own_mask[s, 0, : qlen * group_size, :own] = torch.where(allowed, 0.0, -torch.inf)
        query_rows.append(torch.arange(offsets[i], offsets[i] + qlen))
        padded_rows.append(torch.arange(s * qmax, s * qmax + qlen))
    return SharedPrefix(
        tuple(seqs),
        length,
        torch.cat(query_rows),
        torch.cat(padded_rows),
        own_slots,
        own_mask,
        torch.tensor([query_lengths[i] for i in seqs]),
        torch.tensor(own_counts),
    )


def attend_shared(
    q: torch.Tensor,  # (N_all, H, D) float32: the forward's packed queries
    k_cache: torch.Tensor,  # (slots, KVH, D)
    v_cache: torch.Tensor,
    shared_slots: torch.Tensor,  # (length,) the shared rows
    prefix: SharedPrefix,
) -> torch.Tensor:
    """(N, H * D): the group's queries, in order, attended over the shared rows and each
    sequence's own, merged."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    kvh, d = k_cache.shape[1], head_dim_of(k_cache)
    h = q.shape[1]
    g = h // kvh
    n, s = prefix.query_rows.shape[0], len(prefix.seqs)
    qmax = prefix.own_mask.shape[2] // g
    queries = q.index_select(0, prefix.query_rows)  # (N, H, D)

    def cached(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        return read_rows(cache, slots).to(q.dtype)

    # Every query against the shared rows: (1, KVH, N*G, D), row n*G + g.
    grouped = queries.view(n, kvh, g, d).transpose(0, 1).reshape(1, kvh, n * g, d)
    shared_k = cached(k_cache, shared_slots).transpose(0, 1)[None]
    shared_v = cached(v_cache, shared_slots).transpose(0, 1)[None]
    shared_out, shared_lse = flash(grouped, shared_k, shared_v)
    # Each sequence's queries against its own rows, padded: (S, KVH, Q*G, D).
    padded = queries.new_zeros(s * qmax, h, d).index_copy_(0, prefix.padded_rows, queries)
    padded = padded.view(s, qmax, kvh, g, d).transpose(1, 2).reshape(s, kvh, qmax * g, d)
    slots = prefix.own_slots.view(-1)
    own_k = cached(k_cache, slots).view(s, -1, kvh, d).transpose(1, 2)
    own_v = cached(v_cache, slots).view(s, -1, kvh, d).transpose(1, 2)
    own_out, own_lse = flash(padded, own_k, own_v, attn_mask=prefix.own_mask)
    # Both as (N, KVH, G, ...) in the group's query order.
    own_out = own_out.view(s, kvh, qmax, g, d).transpose(1, 2).reshape(s * qmax, kvh, g, d)
    own_out = own_out.index_select(0, prefix.padded_rows)
    own_lse = own_lse.view(s, kvh, qmax, g).transpose(1, 2).reshape(s * qmax, kvh, g)
    own_lse = own_lse.index_select(0, prefix.padded_rows)
    shared_out = shared_out[0].view(kvh, n, g, d).transpose(0, 1)
    shared_lse = shared_lse[0].view(kvh, n, g).transpose(0, 1)
    # softmax(a ∪ b) = w·softmax(a) + (1 − w)·softmax(b), w = σ(lse_a − lse_b).
    weight = torch.sigmoid(shared_lse - own_lse)[..., None]
    return torch.lerp(own_out, shared_out, weight).reshape(n, h * d)


def attend_shared_in_place(
    q: torch.Tensor,  # (N_all, H, D) float32: the forward's packed queries
    k_cache: torch.Tensor,  # (slots, KVH, D) float32, contiguous
    v_cache: torch.Tensor,
    shared_slots: torch.Tensor,  # (length,) the shared rows
    prefix: SharedPrefix,
) -> torch.Tensor:
    """(N, H * D), as attend_shared computes it: `astrai::shared_prefix_attention`, every
    query over the shared rows and then its own, in one online softmax."""
    kvh, d = k_cache.shape[1], k_cache.shape[2]
    n, h = prefix.query_rows.shape[0], q.shape[1]
    g = h // kvh
    queries = q.index_select(0, prefix.query_rows).view(n, kvh, g, d).transpose(0, 1)
    out = torch.ops.astrai.shared_prefix_attention(
        queries.reshape(kvh, n * g, d).contiguous(),
        k_cache,
        v_cache,
        g,
        shared_slots.contiguous(),
        prefix.own_slots,
        prefix.query_counts,
        prefix.own_counts,
    )
    return out.view(kvh, n, g, d).transpose(0, 1).reshape(n, h * d)
