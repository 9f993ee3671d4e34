"""Prompt chunks whose contexts begin with the same cached rows: that part of attention once.

Why: requests that share a system prompt are prefilled together, each tail a short chunk
attending over the whole shared prompt. Sequence by sequence, every tail gathers the shared
rows' keys and values again and runs its own small attention over them: for 12 W2 tails of
20 tokens behind a 600-token prompt, 3.9 ms a layer on a 2-core Xeon. All the tails' queries
against the shared rows in one attention (the rows gathered once), each tail's own rows
alone, and the two merged by their log-sum-exp: 2.1 ms (docs/BENCHMARKS.md). The merge is
exact up to float rounding: softmax over the union of two key sets is the two partial
softmaxes weighted by their normalisers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Fewer shared rows than this: the merge costs more than gathering them again saves.
MIN_SHARED_ROWS = 64


@dataclass(frozen=True)
class SharedPrefix:
    """Sequences of one forward whose contexts start with the same `length` cache rows, all
    before any of their queries (so every query sees every one of them)."""

    seqs: tuple[int, ...]  # batch indices, ascending
    length: int
    # Per sequence, (1, 1, Q*G, T - length) float32, 0 = may attend, -inf = may not: the
    # mask over its own rows, which the attention kernel that returns log-sum-exps takes.
    own_masks: tuple[torch.Tensor, ...]


def find_shared_prefixes(
    read_slots: torch.Tensor,  # (B, T) int64
    starts: list[int],  # first query position of each sequence
    mask: torch.Tensor,  # (B, Q*G, T) bool, as ForwardBatch's without its head axis
    query_lengths: list[int],
    group_size: int,
) -> tuple[SharedPrefix, ...]:
    """Groups of two or more sequences sharing at least MIN_SHARED_ROWS leading rows.

    Candidates sharing their first row are one group; its shared length is where the first
    of them departs, and at most the earliest query's position.
    """
    by_first_row: dict[int, list[int]] = {}
    for i, start in enumerate(starts):
        if start >= MIN_SHARED_ROWS:
            by_first_row.setdefault(int(read_slots[i, 0]), []).append(i)
    groups = []
    for seqs in by_first_row.values():
        if len(seqs) < 2:
            continue
        limit = min(starts[i] for i in seqs)
        rows = read_slots[seqs, :limit]
        same = (rows == rows[:1]).all(0)
        length = int(same.cumprod(0).sum())
        if length < MIN_SHARED_ROWS:
            continue
        own_masks = []
        for i in seqs:
            context = starts[i] + query_lengths[i]
            allowed = mask[i, : query_lengths[i] * group_size, length:context]
            own = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill_(~allowed, -torch.inf)
            own_masks.append(own[None, None])
        groups.append(SharedPrefix(tuple(seqs), length, tuple(own_masks)))
    return tuple(groups)


def attend_shared(
    queries: list[torch.Tensor],  # per sequence (KVH, Q*G, D) float32, row q*G + g
    own_keys: list[torch.Tensor],  # per sequence (KVH, T - length, D)
    own_values: list[torch.Tensor],
    shared_keys: torch.Tensor,  # (KVH, length, D)
    shared_values: torch.Tensor,
    prefix: SharedPrefix,
) -> list[torch.Tensor]:
    """Per sequence (KVH, Q*G, D): attention over the shared rows and its own, merged."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    every = torch.cat(queries, dim=1)
    shared_out, shared_lse = flash(every[None], shared_keys[None], shared_values[None])
    outs, column = [], 0
    for q, k, v, own_mask in zip(queries, own_keys, own_values, prefix.own_masks, strict=True):
        own_out, own_lse = flash(q[None], k[None], v[None], attn_mask=own_mask)
        width = q.shape[1]
        part, part_lse = shared_out[0, :, column : column + width], shared_lse[0, :, column:]
        # softmax(a ∪ b) = w·softmax(a) + (1 − w)·softmax(b), w = σ(lse_a − lse_b).
        weight = torch.sigmoid(part_lse[:, :width] - own_lse[0])[..., None]
        outs.append(torch.lerp(own_out[0], part, weight))
        column += width
    return outs
