"""Shared-prefix attention: which sequences share rows, and the merged result is attention's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from worker.model.shared_prefix import MIN_SHARED_ROWS, attend_shared, find_shared_prefixes

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
    starts, lengths = [80, 81, 82, 88], [2, 2, 1, 2]
    contexts = [s + n for s, n in zip(starts, lengths, strict=True)]
    read = slots_for(rows)
    mask = causal_mask(starts, lengths, read.shape[1])
    (group,) = find_shared_prefixes(read, starts, mask, lengths, G)
    assert group.seqs == (0, 1, 2)
    assert group.length == 70
    for i, own in zip(group.seqs, group.own_masks, strict=True):
        allowed = mask[i, : lengths[i] * G, 70 : contexts[i]]
        assert own.shape == (1, 1, *allowed.shape)
        assert torch.equal(own[0, 0] == 0, allowed)
        assert torch.isneginf(own[0, 0][~allowed]).all()


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


def test_merged_attention_equals_attention_over_each_whole_context():
    torch.manual_seed(0)
    kvh, d = 3, 16
    length, starts, lengths = 70, [70, 73, 70], [5, 1, 9]
    keys, values = torch.randn(200, kvh, d), torch.randn(200, kvh, d)
    own_rows = [
        list(range(100 + 20 * i, 100 + 20 * i + s + n - length))
        for i, (s, n) in enumerate(zip(starts, lengths, strict=True))
    ]
    rows = [list(range(length)) + own for own in own_rows]
    read = slots_for(rows)
    mask = causal_mask(starts, lengths, read.shape[1])
    (group,) = find_shared_prefixes(read, starts, mask, lengths, G)
    queries = [torch.randn(kvh, n * G, d) for n in lengths]

    def cached(cache: torch.Tensor, slots: list[int]) -> torch.Tensor:
        return cache[slots].transpose(0, 1)

    merged = attend_shared(
        queries,
        [cached(keys, own) for own in own_rows],
        [cached(values, own) for own in own_rows],
        cached(keys, list(range(length))),
        cached(values, list(range(length))),
        group,
    )
    for i, out in enumerate(merged):
        context = starts[i] + lengths[i]
        allowed = mask[i, : lengths[i] * G, :context]
        expected = F.scaled_dot_product_attention(
            queries[i][None].double(),
            cached(keys, rows[i]).double()[None],
            cached(values, rows[i]).double()[None],
            allowed[None, None],
        )[0]
        torch.testing.assert_close(out.double(), expected, atol=1e-6, rtol=1e-6)
