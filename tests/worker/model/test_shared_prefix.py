"""Shared-prefix attention: which sequences share rows, and the merged result is attention's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from worker.kernels import build
from worker.model.shared_prefix import (
    MAX_GROUPED_QUERY,
    MIN_SHARED_ROWS,
    attend_shared,
    attend_shared_in_place,
    find_shared_prefixes,
)

G = 2  # query heads per kv head


def causal_mask(starts: list[int], lengths: list[int], num_keys: int) -> torch.Tensor:
    """(B, Q*G, T) bool as the runner builds it: row q*G + g sees keys up to its position."""
    qlen = max(lengths)
    mask = torch.zeros(len(starts), qlen * G, num_keys, dtype=torch.bool)
    for b, (start, length) in enumerate(zip(starts, lengths, strict=True)):
        pos = torch.arange(start, start + length).repeat_interleave(G)
        mask[b, : length * G] = torch.arange(num_keys)[None, :] <= pos[:, None]
    return mask


def slots_for(rows: list[list[int]]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows])


def test_sequences_behind_the_same_rows_form_one_group_up_to_where_they_part():
    shared = list(range(100, 100 + 80))
    rows = [
        [*shared, 500, 501],  # starts at 80
        [*shared, 600, 601, 602],  # starts at 81: its row 80 is computed context of its own
        shared[:70] + list(range(700, 713)),  # parts at row 70
        list(range(900, 990)),  # shares nothing
    ]
    starts, lengths = [80, 81, 81, 88], [2, 2, 2, 2]
    contexts = [s + n for s, n in zip(starts, lengths, strict=True)]
    read = slots_for(rows)
    mask = causal_mask(starts, lengths, read.shape[1])
    (group,) = find_shared_prefixes(read, starts, mask, lengths, G)
    assert group.seqs == (0, 1, 2)
    assert group.length == 70
    assert group.query_rows.tolist() == [0, 1, 2, 3, 4, 5]  # packed, two queries each
    assert group.padded_rows.tolist() == [0, 1, 2, 3, 4, 5]
    own_lengths = [c - 70 for c in contexts[:3]]
    assert group.own_slots.shape == (3, max(own_lengths))
    for s, i in enumerate(group.seqs):
        own = own_lengths[s]
        assert group.own_slots[s, :own].tolist() == rows[i][70 : contexts[i]]
        allowed = mask[i, : lengths[i] * G, 70 : contexts[i]]
        own_mask = group.own_mask[s, 0, : lengths[i] * G, :own]
        assert torch.equal(own_mask == 0, allowed)
        assert torch.isneginf(own_mask[~allowed]).all()
        assert torch.isneginf(group.own_mask[s, 0, : lengths[i] * G, own:]).all()


def test_one_token_rows_and_long_chunks_do_not_join_the_tails():
    shared = list(range(100, 100 + MIN_SHARED_ROWS))
    lengths = [MAX_GROUPED_QUERY + 1, 3, 1, 3, 1]
    rows = [[*shared, *range(500 + 100 * i, 500 + 100 * i + n)] for i, n in enumerate(lengths)]
    starts = [MIN_SHARED_ROWS] * 5
    read = slots_for(rows)
    mask = causal_mask(starts, lengths, read.shape[1])
    tails, decoding = find_shared_prefixes(read, starts, mask, lengths, G)
    assert (tails.seqs, decoding.seqs) == ((1, 3), (2, 4))
    first = MAX_GROUPED_QUERY + 1
    assert tails.query_rows.tolist() == [*range(first, first + 3), *range(first + 4, first + 7)]
    assert decoding.query_rows.tolist() == [first + 3, first + 7]
    assert decoding.own_mask.shape[2] == G  # padded to one query, not a tail's three


def test_no_group_for_one_sequence_short_shares_or_queries_inside_the_rows():
    shared = list(range(100, 100 + MIN_SHARED_ROWS))
    alone = slots_for([[*shared, 1]])
    assert find_shared_prefixes(alone, [MIN_SHARED_ROWS], causal_mask([64], [1], 65), [1], G) == ()
    short = slots_for([[*shared[:-1], 1], [*shared[:-1], 2]])
    starts = [MIN_SHARED_ROWS - 1] * 2
    mask = causal_mask(starts, [1, 1], MIN_SHARED_ROWS)
    assert find_shared_prefixes(short, starts, mask, [1, 1], G) == ()
    # The first sequence computes rows 32.. of the shared run in this forward: its queries
    # sit inside the rows, so they are not a prefix it attends to in full.
    inside = slots_for([[*shared, 1], [*shared, 2]])
    starts = [32, MIN_SHARED_ROWS]
    mask = causal_mask(starts, [33, 1], MIN_SHARED_ROWS + 1)
    assert find_shared_prefixes(inside, starts, mask, [33, 1], G) == ()


@pytest.mark.parametrize("native", [False, True], ids=["torch", "native"])
def test_merged_attention_equals_attention_over_each_whole_context(native: bool):
    """The torch path (two attentions merged) and the native kernel (one online softmax over
    the shared rows and then each sequence's own, read from the cache in place)."""
    if native and not build.prefill_attention_available():
        pytest.skip("the native attention kernels need AVX-512")
    attend = attend_shared_in_place if native else attend_shared
    torch.manual_seed(0)
    kvh, d = 3, 16
    length, starts, lengths = 70, [70, 73, 70, 75], [5, 1, 9, 1]
    keys, values = torch.randn(200, kvh, d), torch.randn(200, kvh, d)
    own_rows = [
        list(range(100 + 20 * i, 100 + 20 * i + s + n - length))
        for i, (s, n) in enumerate(zip(starts, lengths, strict=True))
    ]
    rows = [list(range(length)) + own for own in own_rows]
    read = slots_for(rows)
    mask = causal_mask(starts, lengths, read.shape[1])
    tails, decoding = find_shared_prefixes(read, starts, mask, lengths, G)
    queries = torch.randn(sum(lengths), kvh * G, d)  # packed (N, H, D)
    merged = torch.empty(sum(lengths), kvh * G * d)
    for group in (tails, decoding):
        shared = torch.arange(length)
        merged[group.query_rows] = attend(queries, keys, values, shared, group)
    offset = 0
    for i, qlen in enumerate(lengths):
        context = starts[i] + qlen
        allowed = mask[i, : qlen * G, :context]
        grouped = queries[offset : offset + qlen].view(qlen, kvh, G, d).transpose(0, 1)
        expected = F.scaled_dot_product_attention(
            grouped.reshape(kvh, qlen * G, d)[None].double(),
            keys[rows[i]].transpose(0, 1)[None].double(),
            values[rows[i]].transpose(0, 1)[None].double(),
            allowed[None, None],
        )[0]
        expected = expected.view(kvh, qlen, G, d).transpose(0, 1).reshape(qlen, kvh * G * d)
        torch.testing.assert_close(
            merged[offset : offset + qlen].double(), expected, atol=1e-6, rtol=1e-6
        )
        offset += qlen
