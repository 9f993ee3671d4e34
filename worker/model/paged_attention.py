"""Attention that reads the KV cache in place: torch's flex_attention over every cache row,
with a block mask built from the sequences' page tables."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import FlexKernelOptions

# Rows per block of the mask, for queries and for cache slots alike: the smallest block
# flex_attention's kernels take, and the default page size, so a decoding sequence's block
# list names its own pages and nothing else.
BLOCK = 16
# The kernel's tiles must divide the mask's blocks; the decoding kernel is not used because
# it assumes one query block per batch row, and here the queries of every sequence are rows
# of one packed batch.
_CUDA_KERNEL_OPTIONS: FlexKernelOptions = {
    "FORCE_USE_FLEX_ATTENTION": True,
    "BLOCK_M": BLOCK,
    "BLOCK_N": BLOCK,
}
_NOT_IN_CONTEXT = torch.iinfo(torch.int32).max  # a slot's position where a sequence lacks it


@dataclass(frozen=True)
class InPlaceAttention:
    """One forward's plan: which cache blocks each block of queries reads, and how.

    Queries are laid out padded: each sequence's rows start a new block of BLOCK rows, so no
    query block reads another sequence's pages. Built once per forward, used by every layer.
    """

    block_mask: BlockMask
    query_rows: torch.Tensor  # (N,) int64: the padded row of each packed query row
    padded_rows: int


def plan_in_place(
    read_slots: torch.Tensor,  # (B, T) int64: cache slot of each context position, padded
    positions: torch.Tensor,  # (N,) int64: each packed query's position in its sequence
    query_lengths: Sequence[int],  # (B,) query rows per sequence, packed in this order
    context_lengths: Sequence[int],  # (B,) context per sequence, its queries included
    num_slots: int,  # cache rows per layer
    window: int | None = None,  # sliding window: keys further back than this are masked
) -> InPlaceAttention:
    """The plan for one forward, built on the device that holds `read_slots`."""
    device = read_slots.device
    num_seqs, width = read_slots.shape
    query_blocks = [-(-n // BLOCK) for n in query_lengths]
    padded_starts = torch.tensor([0, *query_blocks[:-1]]).cumsum(0) * BLOCK
    packed_starts = torch.tensor([0, *query_lengths[:-1]]).cumsum(0)
    lengths = torch.tensor(query_lengths)
    seq_of_row = torch.repeat_interleave(torch.arange(num_seqs), lengths)
    query_rows = (torch.arange(int(lengths.sum())) - packed_starts[seq_of_row]) + padded_starts[
        seq_of_row
    ]
    used_rows = BLOCK * sum(query_blocks)
    # Rounded up to a power of two: the compiled kernel then sees a few query lengths, not
    # one per batch (its guards could recompile it for each). Empty blocks cost nothing.
    padded_rows = 1 << (used_rows - 1).bit_length()
    query_rows = query_rows.to(device)
    # Padded rows belong to their block's sequence (the first, past the used rows), at
    # position -1: they attend to nothing.
    row_seq = torch.repeat_interleave(torch.arange(num_seqs), torch.tensor(query_blocks) * BLOCK)
    row_seq = torch.cat([row_seq, row_seq.new_zeros(padded_rows - used_rows)]).to(device)
    row_pos = torch.full((padded_rows,), -1, dtype=torch.int64, device=device)
    row_pos.index_copy_(0, query_rows, positions)

    # Where each sequence holds a slot: its position there. The smallest wins, so a padding
    # entry (beyond the context, repeating some slot) never hides the position it really has.
    key_pos = torch.arange(width, device=device)
    contexts = torch.tensor(context_lengths, device=device)
    in_context = key_pos[None, :] < contexts[:, None]  # (B, T)
    source = torch.where(in_context, key_pos, _NOT_IN_CONTEXT).to(torch.int32)
    slot_pos = torch.full((num_seqs, num_slots), _NOT_IN_CONTEXT, dtype=torch.int32, device=device)
    slot_pos.scatter_reduce_(1, read_slots, source, reduce="amin")

    def may_attend(
        b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        query = row_pos[q_idx]
        key = slot_pos[row_seq[q_idx], kv_idx]
        allowed = key <= query
        if window is not None:
            allowed = allowed & (key > query - window)
        return allowed

    kv_counts, kv_indices = _block_lists(read_slots, in_context, row_seq, row_pos, num_slots)
    block_mask = BlockMask.from_kv_blocks(
        kv_counts[None, None],
        kv_indices[None, None],
        BLOCK_SIZE=(BLOCK, BLOCK),
        mask_mod=may_attend,
        seq_lengths=(padded_rows, num_slots),
        compute_q_blocks=False,  # inference: the backward's transposed lists are never read
    )
    return InPlaceAttention(block_mask, query_rows, padded_rows)


def _block_lists(
    read_slots: torch.Tensor,
    in_context: torch.Tensor,
    row_seq: torch.Tensor,
    row_pos: torch.Tensor,
    num_slots: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q,) int32 and (Q, T) int32: for each query block, the cache blocks it may read.

    Each sequence's distinct blocks in the order its context first uses them; a query block
    reads those first used at or before its last query's position. Each block once: the
    kernel would count a block listed twice twice.
    """
    width = read_slots.shape[1]
    none = -(-num_slots // BLOCK)  # past every block: sorts last
    blocks = torch.where(in_context, read_slots // BLOCK, none)
    values, positions = torch.sort(blocks, dim=1, stable=True)  # a block's first use leads
    first = torch.ones_like(values, dtype=torch.bool)
    first[:, 1:] = values[:, 1:] != values[:, :-1]
    first &= values != none
    first_use = torch.where(first, positions, width)
    first_use, order = torch.sort(first_use, dim=1)
    by_first_use = values.gather(1, order)
    by_first_use = torch.where(first_use < width, by_first_use, 0)  # unread entries: in range
    block_seq = row_seq[::BLOCK]
    last_pos = row_pos.view(-1, BLOCK).amax(dim=1)
    counts = torch.searchsorted(first_use[block_seq], last_pos[:, None], right=True)[:, 0]
    return counts.to(torch.int32), by_first_use[block_seq].to(torch.int32)


def attend_in_place(
    q: torch.Tensor,  # (N, H, D)
    k_cache: torch.Tensor,  # (num_slots, KVH, D)
    v_cache: torch.Tensor,
    plan: InPlaceAttention,
) -> torch.Tensor:
    """(N, H * D): each query over its own context, read where the cache holds it."""
    n, h, d = q.shape
    dtype = k_cache.dtype
    padded = q.new_zeros(plan.padded_rows, h, d, dtype=dtype)
    padded.index_copy_(0, plan.query_rows, q.to(dtype))
    out = _flex(q.device)(
        padded.transpose(0, 1)[None],  # (1, H, rows, D)
        k_cache.transpose(0, 1)[None],  # (1, KVH, slots, D): a view, nothing copied
        v_cache.transpose(0, 1)[None],
        plan.block_mask,
        h != k_cache.shape[1],
    )
    return out[0].transpose(0, 1).index_select(0, plan.query_rows).reshape(n, h * d).to(q.dtype)


FlexKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, BlockMask, bool], torch.Tensor]
_cuda_kernel: FlexKernel | None = None


def _flex(device: torch.device) -> FlexKernel:
    """flex_attention compiled into its fused kernel on CUDA; torch's unfused reference on
    other devices (correct, and slow: it computes every query against every cache row)."""
    if device.type != "cuda":
        return _reference_flex
    global _cuda_kernel
    if _cuda_kernel is None:
        # dynamic=None: shapes first compiled as seen, then dynamic once they change, as
        # torch.compile does by default (and vLLM's flex backend relies on).
        _cuda_kernel = compiled_flex(dynamic=None, kernel_options=_CUDA_KERNEL_OPTIONS)
    return _cuda_kernel


def compiled_flex(dynamic: bool | None, kernel_options: FlexKernelOptions | None) -> FlexKernel:
    """flex_attention through torch.compile: the block-sparse kernel, reading only the
    blocks each query block lists."""
    compiled = torch.compile(flex_attention, dynamic=dynamic)

    def run(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: BlockMask, gqa: bool
    ) -> torch.Tensor:
        out = compiled(q, k, v, block_mask=mask, enable_gqa=gqa, kernel_options=kernel_options)
        assert isinstance(out, torch.Tensor)
        return out

    return run


def _reference_flex(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: BlockMask, gqa: bool
) -> torch.Tensor:
    with warnings.catch_warnings():
        # "called without torch.compile": intended here, where no fused kernel is wanted.
        warnings.simplefilter("ignore", UserWarning)
        out = flex_attention(q, k, v, block_mask=mask, enable_gqa=gqa)
    assert isinstance(out, torch.Tensor)
    return out
