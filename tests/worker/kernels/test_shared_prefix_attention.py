"""The native shared-prefix attention against torch's SDPA over each sequence's keys (the
shared rows, then its own, causally); against the torch path it replaces, from the groups
the runner finds: tests/worker/model/test_shared_prefix.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.worker.native import needs_native_kernels
from worker.kernels import build

pytestmark = [
    needs_native_kernels,
    pytest.mark.skipif(
        not build.prefill_attention_available(),
        reason="the native attention kernels need AVX-512: torch's computes it here",
    ),
]


def paged_slots(count: int, seed: int) -> torch.Tensor:
    """`count` cache rows in 16-row pages of shuffled order, one row off its page."""
    gen = torch.Generator().manual_seed(seed)
    pages = torch.randperm(count // 16 + 6, generator=gen)[: -(-count // 16)] * 16
    slots = (pages[:, None] + torch.arange(16)).reshape(-1)[:count].clone()
    if count > 40:
        slots[37] = slots.max() + 16
    return slots


def reference(q, k_cache, v_cache, group, shared, own_slots, query_counts, own_counts):
    """Sequence by sequence: its query rows over the shared rows and its own, causally."""
    out, first = torch.empty_like(q), 0
    for s, (asked, own) in enumerate(zip(query_counts.tolist(), own_counts.tolist(), strict=True)):
        rows = slice(first, first + asked * group)
        slots = torch.cat([shared, own_slots[s, :own]])
        keys = k_cache[slots].transpose(0, 1)[None]
        values = v_cache[slots].transpose(0, 1)[None]
        last = len(shared) + own - asked + torch.arange(asked).repeat_interleave(group)
        allowed = torch.arange(len(slots))[None, :] <= last[:, None]
        mask = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
        out[:, rows] = F.scaled_dot_product_attention(q[None, :, rows], keys, values, mask)[0]
        first += asked * group
    return out


# (kv heads, group, head dim, shared rows, [(queries, own rows)]): W2's tails (twelve tokens
# over 576 shared rows), row blocks cut inside a sequence, own rows before the queries and
# past a 64-key block, one-token sequences, shared rows not a whole block.
CASES = [
    (3, 3, 64, 576, [(12, 12)] * 20),
    (2, 4, 128, 100, [(1, 1), (7, 30), (64, 140), (3, 3)]),
    (1, 1, 64, 64, [(50, 50), (50, 60), (1, 70)]),
    (4, 2, 80, 333, [(33, 33), (17, 80)]),
]


@pytest.mark.parametrize(("kv_heads", "group", "dim", "shared_rows", "seqs"), CASES)
def test_equals_sdpa_over_each_sequences_keys(kv_heads, group, dim, shared_rows, seqs):
    torch.manual_seed(shared_rows)
    query_counts = torch.tensor([asked for asked, _ in seqs])
    own_counts = torch.tensor([own for _, own in seqs])
    width = int(own_counts.max())
    slots = paged_slots(shared_rows + width * len(seqs), seed=shared_rows)
    shared, rest = slots[:shared_rows], slots[shared_rows:].view(len(seqs), width)
    own_slots = rest.clone()
    for s, own in enumerate(own_counts.tolist()):
        own_slots[s, own:] = rest[s, 0]  # padding the kernel must not read
    cache_rows = int(slots.max()) + 1
    k_cache = torch.randn(cache_rows, kv_heads, dim) * 2
    v_cache = torch.randn(cache_rows, kv_heads, dim)
    q = torch.randn(kv_heads, int(query_counts.sum()) * group, dim) * 2
    args = (group, shared, own_slots, query_counts, own_counts)
    got = torch.ops.astrai.shared_prefix_attention(q, k_cache, v_cache, *args)
    want = reference(q, k_cache, v_cache, *args)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_inconsistent_counts_and_slots_are_refused_by_name():
    q, cache = torch.randn(2, 6, 64), torch.randn(40, 2, 64)
    shared, own = torch.arange(16), torch.tensor([[20, 21]])
    one, two = torch.tensor([1]), torch.tensor([2])
    call = torch.ops.astrai.shared_prefix_attention
    with pytest.raises(RuntimeError, match="queries times the group"):
        call(q, cache, cache, 3, shared, own, one, two)  # 1 query x 3 rows, 6 rows given
    with pytest.raises(RuntimeError, match="queries <= own rows"):
        call(q, cache, cache, 3, shared, own, torch.tensor([3]), two)
    with pytest.raises(RuntimeError, match="within the cache"):
        call(q, cache, cache, 3, shared, torch.tensor([[20, 40]]), two, two)
    with pytest.raises(RuntimeError, match="int64"):
        call(q, cache, cache, 3, shared.int(), own, two, two)
