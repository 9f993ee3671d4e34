"""In-place paged attention: flex_attention over the whole cache equals attention over each
sequence's gathered context, and the block lists cover every row the mask allows."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from worker.model import paged_attention
from worker.model.paged_attention import BLOCK, attend_in_place, compiled_flex, plan_in_place

# 16: the smallest head the CUDA kernel takes (its tiles multiply 16-wide).
HEADS, KV_HEADS, HEAD_DIM = 6, 2, 16
# On a GPU the compiled kernel runs too, which reads only the listed blocks (bench/gpu_check.sh).
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


def page_tables(
    rng: random.Random, contexts: list[int], page_size: int, num_pages: int, shared: int
) -> torch.Tensor:
    """(B, T) slots as the paged cache lays them out: pages drawn at random from the pool, the
    first `shared` pages common to every sequence, padding from page 0 (which a sequence may
    own too)."""
    pool = list(range(num_pages))
    rng.shuffle(pool)
    common = [pool.pop() for _ in range(shared)]
    width = max(contexts)
    rows = []
    for context in contexts:
        needed = -(-context // page_size)
        pages = common[:needed] + [pool.pop() for _ in range(needed - len(common[:needed]))]
        pages += [0] * (-(-width // page_size) - len(pages))
        slots = [p * page_size + r for p in pages for r in range(page_size)]
        rows.append(slots[:width])
    return torch.tensor(rows)


def expected_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    read_slots: torch.Tensor,
    query_lengths: list[int],
    contexts: list[int],
    window: int | None,
) -> torch.Tensor:
    """Each query row over its sequence's context, gathered: the definition."""
    out, row = [], 0
    group = HEADS // KV_HEADS
    for seq, (qlen, context) in enumerate(zip(query_lengths, contexts, strict=True)):
        slots = read_slots[seq, :context]
        keys = k_cache[slots].transpose(0, 1).repeat_interleave(group, 0)  # (H, T, D)
        values = v_cache[slots].transpose(0, 1).repeat_interleave(group, 0)
        for i in range(qlen):
            pos = context - qlen + i
            allowed = torch.arange(context) <= pos
            if window is not None:
                allowed &= torch.arange(context) > pos - window
            query = q[row].view(HEADS, 1, HEAD_DIM)
            att = F.scaled_dot_product_attention(query, keys, values, attn_mask=allowed[None])
            out.append(att.reshape(HEADS * HEAD_DIM))
            row += 1
    return torch.stack(out)


def run_case(
    device: torch.device,
    query_lengths: list[int],
    contexts: list[int],
    page_size: int = 16,
    shared: int = 0,
    window: int | None = None,
    in_place_rows: tuple[int, int, int] | None = None,  # (seq, from seq, rows) at `shared`
    seed: int = 0,
) -> None:
    rng = random.Random(seed)
    num_pages = 4 + sum(-(-c // page_size) for c in contexts)
    read_slots = page_tables(rng, contexts, page_size, num_pages, shared)
    if in_place_rows is not None:
        # Rows past the shared pages read from another sequence's page while it computes them.
        seq, source, rows = in_place_rows
        at = shared * page_size
        read_slots[seq, at : at + rows] = read_slots[source, at : at + rows]
    num_slots = num_pages * page_size
    torch.manual_seed(seed)
    k_cache = torch.randn(num_slots, KV_HEADS, HEAD_DIM)
    v_cache = torch.randn(num_slots, KV_HEADS, HEAD_DIM)
    q = torch.randn(sum(query_lengths), HEADS, HEAD_DIM)
    positions = torch.cat(
        [torch.arange(c - n, c) for n, c in zip(query_lengths, contexts, strict=True)]
    )
    on = (read_slots, positions, q, k_cache, v_cache)
    slots_on, positions_on, q_on, k_on, v_on = (t.to(device) for t in on)
    plan = plan_in_place(slots_on, positions_on, query_lengths, contexts, num_slots, window)
    got = attend_in_place(q_on, k_on, v_on, plan).cpu()
    want = expected_attention(q, k_cache, v_cache, read_slots, query_lengths, contexts, window)
    tolerance = 2e-6 if device.type == "cpu" else 2e-3  # a GPU's float32 dot may round more
    torch.testing.assert_close(got, want, atol=tolerance, rtol=10 * tolerance)
    check_block_lists(plan, num_slots)


def check_block_lists(plan, num_slots: int) -> None:
    """The reference kernel ignores the block lists; the CUDA kernel reads only them. Every
    (query, slot) pair the mask allows must lie in a listed block, each block listed once."""
    mask = plan.block_mask
    device = mask.kv_indices.device
    rows = torch.arange(plan.padded_rows, device=device)
    slots = torch.arange(num_slots, device=device)
    zero = torch.zeros((), dtype=torch.long, device=device)
    allowed = mask.mask_mod(zero, zero, rows[:, None], slots).cpu()
    counts = mask.kv_num_blocks[0, 0].cpu()
    indices = mask.kv_indices[0, 0].cpu()
    # Entries past a block's count are not read, but a kernel may load them: in range.
    assert indices.min() >= 0 and indices.max() < -(-num_slots // BLOCK)
    for block in range(plan.padded_rows // BLOCK):
        listed = indices[block, : counts[block]].tolist()
        assert len(listed) == len(set(listed)), f"query block {block} lists a block twice"
        needed = allowed[block * BLOCK : (block + 1) * BLOCK].any(dim=0).nonzero()[:, 0]
        assert set((needed // BLOCK).tolist()) <= set(listed), f"query block {block}"


def test_decode_rows_over_scattered_pages(device):
    run_case(device, [1, 1, 1, 1], [1, 17, 40, 33])


def test_decode_rows_sharing_prefix_pages(device):
    run_case(device, [1, 1, 1], [40, 52, 33], shared=2)


def test_prefill_chunks_mixed_with_decode_rows(device):
    run_case(device, [20, 1, 35, 1], [20, 9, 70, 64], seed=1)


def test_chunk_that_starts_mid_page(device):
    run_case(device, [13, 24], [29, 61], seed=2)


@pytest.mark.parametrize("page_size", [8, 32])
def test_pages_smaller_and_larger_than_a_block(device, page_size):
    run_case(device, [1, 18, 1], [30, 50, 77], page_size=page_size, shared=1, seed=3)


def test_rows_read_in_place_from_a_page_another_sequence_computes(device):
    # Sequence 1 reads sequence 0's first 5 rows past the shared pages as they are written.
    run_case(device, [24, 10], [56, 42], shared=2, in_place_rows=(1, 0, 5), seed=4)


def test_sliding_window(device):
    run_case(device, [1, 30, 1], [50, 45, 20], window=12, seed=5)


def test_padding_repeating_a_slot_the_sequence_owns(device):
    # The short sequence may own page 0, which also pads its row: the slot's real position
    # must win over the padding's.
    for seed in range(6):
        run_case(device, [1, 3], [5, 60], seed=10 + seed)


@pytest.mark.slow  # inductor compiles a C++ kernel per shape: ~3 s each on 2 cores
def test_the_block_sparse_kernel_reads_every_row_it_needs(monkeypatch):
    """The compiled kernel reads only the listed blocks (the reference reads every row): on
    the CPU, with static shapes (inductor's CPU template fails to build dynamic ones)."""
    kernel = compiled_flex(dynamic=False, kernel_options=None)
    monkeypatch.setattr(paged_attention, "_flex", lambda device: kernel)
    cpu = torch.device("cpu")
    run_case(cpu, [1, 1, 1, 1], [1, 17, 40, 33], shared=1)
    run_case(cpu, [20, 1, 35, 1], [20, 9, 70, 64], seed=1)
    run_case(cpu, [24, 10], [56, 42], shared=2, in_place_rows=(1, 0, 5), seed=4)
