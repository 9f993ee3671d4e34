"""PageCache: exact pages, ref counts, eviction order and in-flight sharing, driven the way
the scheduler drives it; a stateful property test checks the invariants and the k/v data."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import worker.kv.prefix
from worker.kv.base import Admission, CacheStats, KVStorage, NewPages
from worker.kv.paged import PageCache

PS = 4
T = TypeVar("T")


def make_cache(
    num_pages: int = 8, *, watermark: float = 0.0, enable_prefix_caching: bool = True
) -> PageCache:
    storage = KVStorage(1, num_pages, PS, 1, 2, torch.float32, torch.device("cpu"))
    return PageCache(storage, PS, 64, enable_prefix_caching, watermark)


def stats(cache: PageCache, *, in_use: int, cached: int, free: int, hit_tokens: int) -> CacheStats:
    """The CacheStats `cache` must report; bytes: k + v, 1 layer, 1 head, head_dim 2, fp32."""
    total = cache.pool.num_pages
    return CacheStats(total, in_use, cached, free, PS, hit_tokens, 2 * total * PS * 2 * 4)


def refs(cache: PageCache) -> list[int]:
    return list(cache.pool.allocator.ref_counts)


def lru(cache: PageCache) -> list[int]:
    return cache.pool.allocator.lru_order()


def pending(cache: PageCache) -> dict[int, int | None]:
    """Pending page → owner sequence (None: orphaned)."""
    pool = cache.pool
    return {page: pool.owner_of(page) for page in range(pool.num_pages) if pool.is_pending(page)}


def indexed(cache: PageCache) -> list[int]:
    return [page for page in range(cache.pool.num_pages) if cache.pool.prefix.is_indexed(page)]


def snapshot(cache: PageCache) -> tuple[object, ...]:
    """Everything a failed call must leave as it was."""
    allocator = cache.pool.allocator
    return (
        cache.stats(),
        refs(cache),
        [page for page in range(allocator.num_pages) if allocator.is_free(page)],
        lru(cache),
        pending(cache),
        dict(cache.pool.prefix._pages),
        {s: dataclasses.astuple(cache.table.get(s)) for s in cache.table.seq_ids()},
    )


def compute(cache: PageCache, seq_id: int, tokens: Sequence[int], start: int, end: int) -> None:
    """One scheduler step in which only `seq_id` computes, tokens [shared_ready, end)."""
    cache.begin_step()
    ready = cache.shared_ready(seq_id, start)
    assert ready is not None
    cache.plan(seq_id, ready, end)
    cache.commit(seq_id, tokens, end)


def finish(cache: PageCache, seq_id: int, tokens: Sequence[int]) -> Admission:
    """A whole request: admit, compute the prompt in one step, release."""
    admission = cache.admit(seq_id, tokens)
    assert admission is not None
    compute(cache, seq_id, tokens, admission.num_cached_tokens, len(tokens))
    cache.release(seq_id)
    return admission


PROMPT = list(range(1, 11))  # two full pages and a partial one


def test_the_prompt_pages_a_sequence_computes_for_others_are_its_cache_writes() -> None:
    cache = make_cache()
    cache.admit(1, PROMPT)
    assert cache.cache_written_tokens(1) == 2 * PS  # its two full pages, not the partial one
    cache.admit(2, [*PROMPT[:8], 99, 98, 97, 96, 95])  # shares both, then a full page more
    assert cache.cache_written_tokens(2) == PS
    off = make_cache(enable_prefix_caching=False)
    off.admit(1, PROMPT)
    assert off.cache_written_tokens(1) == 0


def test_admit_into_an_empty_cache_takes_the_lowest_pages() -> None:
    cache = make_cache()
    assert cache.admit(1, PROMPT) == Admission(0, 0)
    assert cache.pages_of(1) == [0, 1, 2]
    assert cache.admit(2, [50, 51, 52, 53, 54]) == Admission(0, 0)
    assert cache.pages_of(2) == [3, 4]
    assert refs(cache) == [1, 1, 1, 1, 1, 0, 0, 0]
    # Full prompt pages are indexed at once, pending until their owner computes them.
    assert pending(cache) == {0: 1, 1: 1, 3: 2}
    assert indexed(cache) == [0, 1, 3]
    assert cache.stats() == stats(cache, in_use=5, cached=0, free=3, hit_tokens=0)


def test_a_finished_prompt_is_cached_and_reused() -> None:
    cache = make_cache()
    assert finish(cache, 1, PROMPT) == Admission(0, 0)
    assert lru(cache) == [1, 0]  # the partial last page is freed, not cached
    assert pending(cache) == {}
    assert cache.stats() == stats(cache, in_use=0, cached=2, free=6, hit_tokens=0)

    assert cache.admit(2, PROMPT) == Admission(8, 8)
    assert cache.pages_of(2) == [0, 1, 2]
    assert refs(cache) == [1, 1, 1, 0, 0, 0, 0, 0]
    assert cache.stats() == stats(cache, in_use=3, cached=0, free=5, hit_tokens=8)
    cache.begin_step()
    assert cache.shared_ready(2, 8) == 8


@pytest.mark.parametrize(
    ("num_tokens", "num_hit"),
    # Up to the last token, from full pages and rows copied from the next cached page;
    # a partial last page is never cached, so a 3-token prompt leaves nothing to hit.
    [(3, 0), (4, 3), (5, 4), (8, 7), (9, 8), (12, 11), (13, 12), (16, 15)],
)
def test_the_last_token_is_never_a_hit(num_tokens: int, num_hit: int) -> None:
    cache = make_cache()
    tokens = list(range(1, num_tokens + 1))
    finish(cache, 1, tokens)
    assert cache.admit(2, tokens) == Admission(num_hit, num_hit)
    assert cache.stats().hit_tokens == num_hit


def test_a_prompt_of_whole_pages_keeps_its_last_page_cached_once() -> None:
    cache = make_cache()
    tokens = list(range(1, 9))
    finish(cache, 1, tokens)
    assert lru(cache) == [1, 0]
    # Page 0 is shared; 3 rows of page 1 are copied into the new page 2, which computes
    # the last token itself.
    assert finish(cache, 2, tokens) == Admission(7, 7)
    # Page 2 holds the same tokens as page 1, which stays the indexed copy: page 2 is freed.
    assert lru(cache) == [1, 0]
    assert indexed(cache) == [0, 1]
    assert cache.stats() == stats(cache, in_use=0, cached=2, free=6, hit_tokens=7)
    assert cache.admit(3, [*tokens, 9]) == Admission(8, 8)
    assert cache.pages_of(3) == [0, 1, 2]


def test_live_sequences_sharing_a_prefix_hold_one_reference_each() -> None:
    cache = make_cache()
    cache.admit(1, PROMPT)
    compute(cache, 1, PROMPT, 0, len(PROMPT))
    other = [*PROMPT[:8], 50, 51, 52]
    assert cache.admit(2, other) == Admission(8, 8)
    assert cache.pages_of(2) == [0, 1, 3]
    assert refs(cache) == [2, 2, 1, 1, 0, 0, 0, 0]
    assert cache.stats() == stats(cache, in_use=4, cached=0, free=4, hit_tokens=8)

    cache.release(1)
    assert refs(cache) == [1, 1, 0, 1, 0, 0, 0, 0]
    assert lru(cache) == []
    assert cache.stats() == stats(cache, in_use=3, cached=0, free=5, hit_tokens=8)

    cache.release(2)
    assert refs(cache) == [0] * 8
    assert lru(cache) == [1, 0]
    assert cache.stats() == stats(cache, in_use=0, cached=2, free=6, hit_tokens=8)


def test_eviction_takes_the_deepest_page_of_the_least_recently_released_first() -> None:
    cache = make_cache(6)
    first = list(range(1, 10))
    second = list(range(101, 110))
    finish(cache, 1, first)  # pages 0 1 2
    finish(cache, 2, second)  # pages 2 3 4
    assert lru(cache) == [1, 0, 3, 2]

    cache.admit(3, list(range(201, 210)))
    assert cache.pages_of(3) == [4, 5, 1]  # free pages first, then first's deepest page
    assert lru(cache) == [0, 3, 2]
    assert indexed(cache) == [0, 2, 3, 4, 5]

    assert cache.admit(4, first) == Admission(4, 4)  # page 1 is gone, page 0 still hits
    assert cache.pages_of(4) == [0, 3, 2]  # second's chain, deepest first
    assert lru(cache) == []
    assert cache.stats() == stats(cache, in_use=6, cached=0, free=0, hit_tokens=4)


def test_equal_pages_after_a_different_earlier_prefix_are_not_reused() -> None:
    cache = make_cache()
    finish(cache, 1, [1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert cache.admit(2, [9, 9, 9, 9, 5, 6, 7, 8, 9]) == Admission(0, 0)
    assert cache.pages_of(2) == [2, 3, 4]
    assert refs(cache) == [0, 0, 1, 1, 1, 0, 0, 0]
    assert lru(cache) == [1, 0]
    assert cache.stats().hit_tokens == 0


def test_pages_completed_by_decoding_join_the_index() -> None:
    cache = make_cache()
    tokens = [1, 2, 3, 4, 5, 6]
    cache.admit(1, tokens)
    compute(cache, 1, tokens, 0, 6)
    for token in (7, 8):  # decode: the sampled token's k/v is computed in the next step
        tokens.append(token)
        assert cache.grow(1, len(tokens))
        cache.commit(1, tokens, len(tokens))
    assert indexed(cache) == [0, 1]
    cache.release(1)
    assert lru(cache) == [1, 0]
    assert cache.admit(2, [*tokens, 9]) == Admission(8, 8)


def test_a_preempted_sequence_readmitted_with_its_output_hits_its_own_pages() -> None:
    cache = make_cache()
    tokens = [1, 2, 3, 4, 5, 6, 7]
    cache.admit(1, tokens)
    compute(cache, 1, tokens, 0, 7)
    tokens += [8, 9]
    for num_tokens in (8, 9):
        assert cache.grow(1, num_tokens)
        cache.commit(1, tokens[:num_tokens], num_tokens)
    tokens.append(10)  # sampled, not computed
    cache.release(1)
    assert lru(cache) == [1, 0]
    assert cache.admit(1, tokens) == Admission(8, 8)
    assert cache.pages_of(1) == [0, 1, 2]


def test_in_flight_sharing_waits_until_the_owner_plans_or_commits() -> None:
    cache = make_cache()
    first = list(range(1, 10))
    second = [*first[:8], 70, 71]
    assert cache.admit(1, first) == Admission(0, 0)
    assert cache.admit(2, second) == Admission(0, 8)
    assert cache.pages_of(2) == [0, 1, 3]
    assert refs(cache) == [2, 2, 1, 1, 0, 0, 0, 0]
    assert pending(cache) == {0: 1, 1: 1}
    assert cache.stats() == stats(cache, in_use=4, cached=0, free=4, hit_tokens=8)

    cache.begin_step()  # the owner computes page 0 only
    assert cache.shared_ready(1, 0) == 0
    cache.plan(1, 0, 4)
    assert cache.shared_ready(2, 0) is None
    cache.commit(1, first, 4)
    assert pending(cache) == {1: 1}

    cache.begin_step()  # half of page 1 planned is not enough
    assert cache.shared_ready(1, 4) == 4
    cache.plan(1, 4, 6)
    assert cache.shared_ready(2, 0) is None
    cache.commit(1, first, 6)

    cache.begin_step()  # page 1 planned in this very forward: the sharer starts after it
    assert cache.shared_ready(1, 6) == 6
    cache.plan(1, 6, 9)
    assert cache.shared_ready(2, 0) == 8
    cache.plan(2, 8, 10)
    cache.commit(1, first, 9)
    cache.commit(2, second, 10)
    assert pending(cache) == {}
    assert refs(cache) == [2, 2, 1, 1, 0, 0, 0, 0]

    cache.release(1)
    cache.release(2)
    assert lru(cache) == [1, 0]
    assert cache.stats() == stats(cache, in_use=0, cached=2, free=6, hit_tokens=8)


def test_in_flight_sharing_passes_pages_committed_in_an_earlier_step() -> None:
    cache = make_cache()
    first = list(range(1, 10))
    cache.admit(1, first)
    cache.admit(2, first)
    compute(cache, 1, first, 0, 9)
    cache.begin_step()
    assert cache.shared_ready(2, 0) == 8
    assert cache.stats().hit_tokens == 8


def test_an_aborted_owner_orphans_its_pending_pages_and_the_sharer_adopts_them() -> None:
    cache = make_cache()
    first = list(range(1, 10))
    second = [*first[:8], 70, 71]
    cache.admit(1, first)
    cache.admit(2, second)
    cache.release(1)
    assert refs(cache) == [1, 1, 0, 1, 0, 0, 0, 0]
    assert pending(cache) == {0: None, 1: None}
    assert indexed(cache) == []  # uncomputed pages must not be hit by anyone new
    assert cache.stats() == stats(cache, in_use=3, cached=0, free=5, hit_tokens=8)
    assert cache.admit(3, first) == Admission(0, 0)
    assert cache.pages_of(3) == [2, 4, 5]
    cache.release(3)

    cache.begin_step()
    assert cache.shared_ready(2, 0) == 0
    assert pending(cache) == {0: 2, 1: None}
    assert cache.stats().hit_tokens == 0  # it computes the 8 tokens itself after all
    cache.plan(2, 0, 10)
    cache.commit(2, second, 10)
    assert pending(cache) == {}
    assert indexed(cache) == [0, 1]
    cache.release(2)
    assert lru(cache) == [1, 0]
    assert cache.admit(4, first) == Admission(8, 8)
    assert cache.stats().hit_tokens == 8


def test_an_owner_aborted_after_its_first_page_leaves_the_sharer_the_rest() -> None:
    cache = make_cache()
    first = list(range(1, 10))
    second = [*first[:8], 70, 71]
    cache.admit(1, first)
    cache.admit(2, second)
    compute(cache, 1, first, 0, 6)
    cache.release(1)
    assert refs(cache) == [1, 1, 0, 1, 0, 0, 0, 0]
    assert pending(cache) == {1: None}
    assert indexed(cache) == [0]

    cache.begin_step()
    assert cache.shared_ready(2, 0) == 4
    assert pending(cache) == {1: 2}
    assert cache.stats().hit_tokens == 4  # the owner's computed first page only
    cache.plan(2, 4, 10)
    cache.commit(2, second, 10)
    assert pending(cache) == {}
    assert indexed(cache) == [0, 1]


def test_a_second_sharer_waits_for_the_adopter() -> None:
    cache = make_cache()
    first = list(range(1, 10))
    cache.admit(1, first)
    cache.admit(2, first)
    cache.admit(3, [*first[:8], 60])
    cache.release(1)

    cache.begin_step()  # the adopter computes only half of page 0
    assert cache.shared_ready(2, 0) == 0
    cache.plan(2, 0, 2)
    assert cache.shared_ready(3, 0) is None
    cache.commit(2, first, 2)
    assert pending(cache) == {0: 2, 1: None}

    cache.begin_step()
    assert cache.shared_ready(2, 2) == 2
    cache.plan(2, 2, 9)
    assert cache.shared_ready(3, 0) == 8
    cache.plan(3, 8, 9)
    cache.commit(2, first, 9)
    cache.commit(3, [*first[:8], 60], 9)
    assert pending(cache) == {}


def test_pending_pages_are_freed_never_cached() -> None:
    cache = make_cache()
    cache.admit(1, list(range(1, 10)))
    cache.release(1)
    assert lru(cache) == []
    assert indexed(cache) == []
    assert pending(cache) == {}
    assert cache.stats() == stats(cache, in_use=0, cached=0, free=8, hit_tokens=0)

    cache.admit(2, list(range(1, 10)))
    compute(cache, 2, list(range(1, 10)), 0, 6)  # page 0 computed, page 1 half
    cache.release(2)
    assert lru(cache) == [0]
    assert indexed(cache) == [0]
    assert cache.stats() == stats(cache, in_use=0, cached=1, free=7, hit_tokens=0)


def test_a_failed_grow_changes_nothing() -> None:
    cache = make_cache(3)
    tokens = list(range(1, 9))
    cache.admit(1, tokens)
    compute(cache, 1, tokens, 0, 8)
    cache.admit(2, [50, 51, 52])
    before = snapshot(cache)
    assert not cache.grow(1, 9)
    assert snapshot(cache) == before
    assert cache.grow(1, 8)  # already room: nothing to do
    assert snapshot(cache) == before

    cache.release(2)
    assert cache.grow(1, 9)
    assert cache.pages_of(1) == [0, 1, 2]


def test_the_step_plan_lists_the_pages_each_sequence_was_given_since_begin_step() -> None:
    cache = make_cache()
    cache.begin_step()
    cache.admit(1, PROMPT)  # three pages
    cache.admit(2, [50, 51])
    assert cache.grow(1, 13)  # a fourth
    assert cache.step_plan().allocated == (NewPages(1, (0, 1, 2, 4)), NewPages(2, (3,)))
    cache.release(2)  # given back within the step: not in its plan
    assert cache.step_plan().allocated == (NewPages(1, (0, 1, 2, 4)),)
    cache.begin_step()
    assert cache.grow(1, 16)  # room already
    assert cache.step_plan().allocated == ()


def test_grow_evicts_cached_pages() -> None:
    cache = make_cache(3)
    finish(cache, 2, [50, 51, 52, 53, 54])  # page 0 cached, page 1 freed
    tokens = list(range(1, 9))
    cache.admit(1, tokens)
    assert cache.pages_of(1) == [1, 2]
    assert lru(cache) == [0]
    assert cache.grow(1, 9)
    assert cache.pages_of(1) == [1, 2, 0]
    assert lru(cache) == []
    assert indexed(cache) == [1, 2]


def test_a_failed_admit_changes_nothing() -> None:
    cache = make_cache(6)
    first = list(range(1, 10))
    finish(cache, 1, first)  # pages 0, 1 cached
    cache.admit(2, list(range(201, 213)))  # pages 2 3 4
    assert lru(cache) == [1, 0]
    before = snapshot(cache)
    # Reuses the two cached pages and needs three more: only one is left after reuse.
    assert cache.admit(3, [*first[:8], *range(300, 310)]) is None
    assert cache.admit(4, list(range(400, 413))) is None  # 4 pages, 3 available
    assert snapshot(cache) == before
    assert cache.admit(5, [*first[:8], 300]) == Admission(8, 8)
    assert cache.pages_of(5) == [0, 1, 5]


def test_admitting_a_sequence_twice_raises_and_changes_nothing() -> None:
    cache = make_cache()
    finish(cache, 1, PROMPT)
    cache.admit(2, PROMPT)
    before = snapshot(cache)
    with pytest.raises(KeyError, match="sequence 2 already has a page table"):
        cache.admit(2, PROMPT)
    assert snapshot(cache) == before


def test_the_watermark_keeps_pages_for_running_sequences_to_grow_into() -> None:
    cache = make_cache(8, watermark=0.25)
    assert cache.watermark_pages == 2
    assert cache.admit(1, list(range(1, 25))) == Admission(0, 0)  # 6 pages + 2 reserved
    before = snapshot(cache)
    assert cache.admit(2, [50]) is None
    assert snapshot(cache) == before
    assert cache.grow(1, 32)
    assert cache.pages_of(1) == list(range(8))


def test_the_watermark_never_blocks_a_sequence_alone_in_the_cache() -> None:
    cache = make_cache(8, watermark=0.25)
    assert cache.max_tokens_per_seq == 32
    assert cache.admit(1, list(range(1, 33))) == Admission(0, 0)
    assert cache.stats() == stats(cache, in_use=8, cached=0, free=0, hit_tokens=0)


def test_slots_and_read_slots_are_flat_rows_of_the_page_table() -> None:
    cache = make_cache()
    cache.admit(1, PROMPT)
    compute(cache, 1, PROMPT, 0, 10)
    cache.admit(2, [*PROMPT[:8], 50, 51, 52])
    assert cache.pages_of(1) == [0, 1, 2]
    assert cache.pages_of(2) == [0, 1, 3]
    assert cache.slots(1, 2, 7) == [2, 3, 4, 5, 6]
    assert cache.slots(2, 6, 11) == [6, 7, 12, 13, 14]
    assert cache.slots(2, 3, 3) == []

    rows = cache.read_slots([2, 1], [11, 6])
    assert rows.dtype == torch.int64
    assert rows.shape == (2, 11)
    assert rows[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14]
    assert rows[1, :6].tolist() == [0, 1, 2, 3, 4, 5]
    assert all(0 <= row < 8 * PS for row in rows[1, 6:].tolist())  # padding, masked out


def test_disabled_prefix_caching_never_hits() -> None:
    cache = make_cache(enable_prefix_caching=False)
    assert finish(cache, 1, PROMPT) == Admission(0, 0)
    assert lru(cache) == []
    assert cache.admit(2, PROMPT) == Admission(0, 0)
    assert cache.admit(3, PROMPT) == Admission(0, 0)  # arriving together: no sharing either
    assert cache.pages_of(2) == [0, 1, 2]
    assert cache.pages_of(3) == [3, 4, 5]
    assert pending(cache) == {}
    assert indexed(cache) == []
    cache.begin_step()
    assert cache.shared_ready(3, 0) == 0
    cache.release(2)
    cache.release(3)
    assert cache.stats() == stats(cache, in_use=0, cached=0, free=8, hit_tokens=0)


def test_a_prompt_diverging_mid_page_copies_the_rows_it_shares() -> None:
    cache = make_cache()
    finish(cache, 1, [*PROMPT, 11, 12])  # pages 0, 1, 2 full: 1..4, 5..8, 9..12
    k = cache.storage.k
    k[0, 2] = torch.arange(PS * 2, dtype=torch.float32).view(PS, 1, 2)  # page 2's rows
    other = [*PROMPT[:8], 9, 10, 99, 98, 97]  # page 2 diverges after two tokens
    assert cache.admit(2, other) == Admission(10, 10)
    own = cache.pages_of(2)
    assert own[:2] == [0, 1] and own[2] not in (0, 1, 2)
    torch.testing.assert_close(k[0, own[2], :2], k[0, 2, :2])
    assert not k[0, own[2], 2:].any()  # the rest is this sequence's to compute
    assert cache.stats().hit_tokens == 10
    assert refs(cache)[2] == 0 and 2 in lru(cache)  # the source went back to the cache
    cache.begin_step()
    assert cache.shared_ready(2, 10) == 10


def test_rows_a_pending_page_shares_are_copied_once_it_is_computed() -> None:
    cache = make_cache()
    long_prompt = [*PROMPT, 11, 12, 13]
    other = [*PROMPT, 11, 50]
    assert cache.admit(1, long_prompt) == Admission(0, 0)  # pages 0..2 pending
    # The pending full pages, and 9..11 of page 2 (9..12), pending too: shared, not computed.
    assert cache.admit(2, other) == Admission(0, 11)
    k = cache.storage.k

    cache.begin_step()  # the owner computes pages 0 and 1: page 2 is not ready
    assert cache.shared_ready(1, 0) == 0
    cache.plan(1, 0, 8)
    assert cache.shared_ready(2, 0) is None
    cache.commit(1, long_prompt, 8)

    cache.begin_step()
    assert cache.shared_ready(1, 8) == 8
    cache.plan(1, 8, 13)
    compute(cache, 1, long_prompt, 8, 13)
    k[0, 2] = torch.arange(PS * 2, dtype=torch.float32).view(PS, 1, 2)  # page 2 computed
    cache.begin_step()
    assert cache.shared_ready(2, 0) == 11  # copied now: it computes token 50 only
    own = cache.pages_of(2)[2]
    torch.testing.assert_close(k[0, own, :3], k[0, 2, :3])
    assert not k[0, own, 3:].any()
    assert cache.stats().hit_tokens == 11


def test_a_pending_page_computed_in_the_same_forward_is_read_in_place_then_copied() -> None:
    cache = make_cache()
    long_prompt = [*PROMPT, 11, 12, 13]
    other = [*PROMPT, 11, 50, 51, 52, 53, 54]  # 9..11 shared, page 2 its own and full
    cache.admit(1, long_prompt)
    cache.admit(2, other)
    third = [*other[:12], 60]  # would share all of the second's page 2
    compute(cache, 1, long_prompt, 0, 8)

    cache.begin_step()  # the owner completes page 2 in the forward the sharer starts in
    assert cache.shared_ready(1, 8) == 8
    cache.plan(1, 8, 13)
    assert cache.shared_ready(2, 0) == 11
    cache.plan(2, 11, 16)
    own, last = cache.pages_of(2)[2:]
    rows = cache.read_slots([2], [16])[0]
    assert rows[8:11].tolist() == [2 * PS, 2 * PS + 1, 2 * PS + 2]  # the owner's page 2
    assert rows[11:16].tolist() == [own * PS + 3, *(last * PS + i for i in range(PS))]
    # A prompt sharing the sharer's page 2 must wait: its first rows are copied after.
    assert cache.admit(3, third) == Admission(8, 12)
    assert cache.shared_ready(3, 8) is None

    k = cache.storage.k
    k[0, 2] = torch.arange(PS * 2, dtype=torch.float32).view(PS, 1, 2)  # the forward
    cache.commit(1, long_prompt, 13)
    cache.commit(2, other, 16)
    torch.testing.assert_close(k[0, own, :3], k[0, 2, :3])
    assert cache.read_slots([2], [16])[0, 8:11].tolist() == [own * PS + i for i in range(3)]
    cache.begin_step()
    assert cache.shared_ready(3, 8) == 12


def test_rows_of_a_page_its_owner_left_uncomputed_are_computed_after_all() -> None:
    cache = make_cache()
    long_prompt = [*PROMPT, 11, 12, 13]
    cache.admit(1, long_prompt)
    assert cache.admit(2, [*PROMPT, 11, 50]) == Admission(0, 11)
    compute(cache, 1, long_prompt, 0, 8)
    cache.release(1)  # page 2 orphaned, out of the index
    cache.begin_step()
    assert cache.shared_ready(2, 0) == 8
    assert cache.stats().hit_tokens == 8


def test_rows_never_come_from_a_page_whose_owner_waits_for_rows_of_its_own() -> None:
    """In a chain of such waits each link cost a forward (W2's tails, each like another's)."""
    cache = make_cache()
    cache.admit(0, [*PROMPT, 40, 41, 42])  # page 2: 9, 10, 40, 41
    assert cache.admit(1, [*PROMPT, 11, 50, 51, 52, 53]) == Admission(0, 10)  # 9, 10 from it
    # Sequence 1's page 2 (9, 10, 11, 50) begins more like this one, but waits for rows.
    assert cache.admit(2, [*PROMPT, 11, 77, 78]) == Admission(0, 10)


def test_a_source_whose_owner_left_is_not_replaced_by_a_later_pending_page() -> None:
    cache = make_cache()
    cache.admit(0, [1, 1, 1, 1])  # a pending page starting with 1
    assert cache.admit(1, [*PROMPT, 1]) == Admission(0, 1)  # its token 1 from that page
    cache.release(0)
    assert cache.admit(2, [1, 1, 1, 1, 1]) == Admission(0, 0)
    cache.begin_step()
    # Only sequence 2's page, indexed after sequence 1, starts with 1 now: 1 computes it
    # (waiting for a later sequence could close a circle).
    assert cache.shared_ready(1, 0) == 0
    assert cache.stats().hit_tokens == 0


def test_no_rows_are_copied_from_the_sequences_own_page() -> None:
    cache = make_cache()
    cache.admit(1, [*PROMPT, 11, 12, 13])
    second = [*PROMPT, 11, 12, 13, 14]
    cache.admit(2, second)  # its pages 0..2 are the first's: page 3 its own
    third = [*PROMPT, 11, 12, 13, 14, 15, 16, 17, 18]
    cache.release(1)
    cache.release(2)
    # Nothing of the index is left: the third shares nothing, and never waits for itself.
    assert cache.admit(3, third) == Admission(0, 0)
    cache.begin_step()
    assert cache.shared_ready(3, 0) == 0


def test_a_prompt_diverging_inside_its_first_page_copies_from_a_cached_first_page() -> None:
    cache = make_cache()
    finish(cache, 1, PROMPT)
    assert cache.admit(2, [1, 2, 77, 78, 79]) == Admission(2, 2)


def test_the_longest_matching_sibling_is_copied() -> None:
    cache = make_cache(12)
    finish(cache, 1, [*PROMPT[:4], 5, 6, 0, 0, 1])
    finish(cache, 2, [*PROMPT[:4], 5, 6, 7, 0, 1])
    admission = cache.admit(3, [*PROMPT[:4], 5, 6, 7, 1, 1])
    assert admission == Admission(7, 7)


# -- property test: random requests driven through the scheduler protocol ---------------

NUM_PAGES = 12
MAX_LEN = 20  # a sequence finishes once it holds this many tokens
# Prompts start with one of these, so full pages are shared; the last one repeats the
# second page of the first after a different first page, which must never be reused.
PREFIXES = (
    (),
    (1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
    (1, 2, 3, 4, 5, 6, 7, 7, 7),
    (9, 9, 9, 9, 5, 6, 7, 8),
)


@dataclasses.dataclass
class Seq:
    tokens: list[int]
    num_computed: int
    is_decoding: bool = False  # the prompt is computed; the last token is sampled, not yet


class PageCacheMachine(RuleBasedStateMachine):
    """Each computed position's k holds a number standing for the token prefix it ends, so a
    sequence reading its context sees exactly its own prefixes unless a page is shared wrongly.
    """

    def __init__(self) -> None:
        super().__init__()
        self.cache = make_cache(NUM_PAGES, watermark=0.1)
        self.live: dict[int, Seq] = {}  # in admission order
        self.preempted: list[list[int]] = []
        self.next_id = 0
        self.value_of: dict[tuple[int, ...], float] = {}

    # -- helpers ----------------------------------------------------------------------
    def _value(self, prefix: Sequence[int]) -> float:
        return self.value_of.setdefault(tuple(prefix), float(len(self.value_of) + 1))

    def _expected(self, tokens: Sequence[int], length: int) -> list[float]:
        return [self.value_of.get(tuple(tokens[: i + 1]), -1.0) for i in range(length)]

    def _k_rows(self) -> torch.Tensor:
        return self.cache.storage.layers[0][0][:, 0, 0]  # (rows,) first k element

    def _admit(self, tokens: list[int]) -> bool:
        before = snapshot(self.cache)
        hit_tokens = self.cache.stats().hit_tokens
        seq_id = self.next_id
        self.next_id += 1
        admission = self.cache.admit(seq_id, tokens)
        if admission is None:
            assert snapshot(self.cache) == before
            return False
        num_cached, num_shared = admission
        # Whole pages, plus the rows of a page after them that begins the same way: copied at
        # admission when it and every matched page are computed, else later; never the
        # last token.
        assert num_cached % PS == 0 or num_cached == num_shared
        assert 0 <= num_cached <= num_shared <= len(tokens) - 1
        assert len(self.cache.pages_of(seq_id)) == -(-len(tokens) // PS)
        assert self.cache.stats().hit_tokens == hit_tokens + num_shared
        self.live[seq_id] = Seq(list(tokens), num_cached)
        return True

    def _release(self, seq_id: int) -> Seq:
        self.cache.release(seq_id)
        return self.live.pop(seq_id)

    # -- rules --------------------------------------------------------------------------
    @precondition(lambda self: len(self.live) < 5)
    @rule(
        prefix=st.sampled_from(PREFIXES),
        suffix=st.lists(st.integers(1, 3), min_size=1, max_size=6),
    )
    def admit(self, prefix: tuple[int, ...], suffix: list[int]) -> None:
        self._admit([*prefix, *suffix])

    @precondition(lambda self: len(self.live) < 4)
    @rule(
        prefix=st.sampled_from(PREFIXES[1:]),
        suffixes=st.lists(st.lists(st.integers(1, 3), max_size=4), min_size=2, max_size=3),
    )
    def admit_together(self, prefix: tuple[int, ...], suffixes: list[list[int]]) -> None:
        """Requests with one prefix arriving in the same refill share its pending pages."""
        for suffix in suffixes:
            self._admit([*prefix, *suffix])

    @precondition(lambda self: self.preempted and len(self.live) < 5)
    @rule(data=st.data())
    def readmit(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.preempted) - 1))
        if self._admit(self.preempted[i]):
            del self.preempted[i]

    @precondition(lambda self: self.live)
    @rule(data=st.data(), is_preempted=st.booleans())
    def leave(self, data: st.DataObject, is_preempted: bool) -> None:
        """Abort, or preempt to be readmitted later with its output; at any phase."""
        seq = self._release(data.draw(st.sampled_from(sorted(self.live))))
        if is_preempted:
            self.preempted.append(seq.tokens)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), num_steps=st.integers(1, 4))
    def steps(self, data: st.DataObject, num_steps: int) -> None:
        for _ in range(num_steps):
            self._step(data)

    def _step(self, data: st.DataObject | None) -> None:
        """One scheduler step: grow decodes, plan prefills, forward, commit.

        Without `data` it drains: no decode, and every prefill gets all the tokens it wants.
        """

        def draw(strategy: st.SearchStrategy[T], default: T) -> T:
            return default if data is None else data.draw(strategy)

        cache = self.cache
        decodes: list[int] = []
        for seq_id, seq in list(self.live.items()):
            if not seq.is_decoding or not draw(st.booleans(), False):
                continue
            before = snapshot(cache)
            if cache.grow(seq_id, len(seq.tokens)):
                decodes.append(seq_id)
            else:
                assert snapshot(cache) == before
                self.preempted.append(self._release(seq_id).tokens)

        cache.begin_step()
        budget = draw(st.integers(1, 12), 10**6)
        work: list[tuple[int, int, int]] = []
        for seq_id, seq in self.live.items():
            if seq.is_decoding:
                continue
            if budget == 0:
                break
            start = cache.shared_ready(seq_id, seq.num_computed)
            if start is None:
                continue
            assert seq.num_computed <= start < len(seq.tokens)
            remaining = len(seq.tokens) - start
            end = start + draw(st.integers(1, min(budget, remaining)), remaining)
            cache.plan(seq_id, start, end)
            seq.num_computed = start  # the rest of the shared prefix is computed by others
            work.append((seq_id, start, end))
            budget -= end - start
        work += [
            (seq_id, len(self.live[seq_id].tokens) - 1, len(self.live[seq_id].tokens))
            for seq_id in decodes
        ]
        if not work:
            return

        k_rows = self._k_rows()  # the forward: write every new token's k, then read
        for seq_id, start, end in work:
            tokens = self.live[seq_id].tokens
            slots = cache.slots(seq_id, start, end)
            k_rows[torch.tensor(slots)] = torch.tensor(
                [self._value(tokens[: i + 1]) for i in range(start, end)]
            )
        self._check_reads([(seq_id, end) for seq_id, _, end in work])

        for seq_id, _, end in work:
            seq = self.live[seq_id]
            cache.commit(seq_id, seq.tokens, end)
            seq.num_computed = end
            if end == len(seq.tokens):  # sample the next token
                seq.tokens.append(draw(st.integers(1, 3), 1))
                seq.is_decoding = True
                if len(seq.tokens) >= MAX_LEN:
                    self._release(seq_id)

    def _check_reads(self, contexts: Sequence[tuple[int, int]]) -> None:
        """Each sequence's context, read as attention reads it, holds its own prefixes."""
        if not contexts:
            return
        seq_ids = [seq_id for seq_id, _ in contexts]
        lengths = [length for _, length in contexts]
        rows = self.cache.read_slots(seq_ids, lengths)
        assert rows.shape == (len(contexts), max(lengths))
        values = self._k_rows()[rows]
        for row, (seq_id, length) in enumerate(contexts):
            assert values[row, :length].tolist() == self._expected(
                self.live[seq_id].tokens, length
            ), f"sequence {seq_id} reads a context that is not its own"

    # -- invariants ---------------------------------------------------------------------
    @invariant()
    def every_page_is_in_exactly_one_state(self) -> None:
        allocator = self.cache.pool.allocator
        cached = set(allocator.lru_order())
        holders = [0] * NUM_PAGES
        assert sorted(self.cache.table.seq_ids()) == sorted(self.live)
        for seq_id in self.live:
            pages = self.cache.pages_of(seq_id)
            assert len(set(pages)) == len(pages)
            for page in pages:
                holders[page] += 1
        assert allocator.ref_counts == holders
        for page in range(NUM_PAGES):
            states = [allocator.is_free(page), page in cached, holders[page] > 0]
            assert states.count(True) == 1, f"page {page}: free, cached, in use = {states}"
        stats = self.cache.stats()
        assert stats.pages_free == sum(map(allocator.is_free, range(NUM_PAGES)))
        assert stats.pages_cached == len(cached)
        assert stats.pages_in_use == sum(1 for n in holders if n)
        assert stats.pages_free + stats.pages_cached + stats.pages_in_use == NUM_PAGES

    @invariant()
    def pending_pages_are_held_and_cached_pages_indexed(self) -> None:
        pool = self.cache.pool
        for page, owner in pending(self.cache).items():
            assert pool.allocator.ref_counts[page] > 0, f"pending page {page} is not held"
            if owner is not None:
                assert owner in self.live and page in self.cache.pages_of(owner)
        for page in pool.allocator.lru_order():
            assert pool.prefix.is_indexed(page) and not pool.is_pending(page)

    @invariant()
    def computed_indexed_pages_hold_what_their_chain_says(self) -> None:
        entries = self.cache.pool.prefix._pages
        for page in entries:
            chain = [page]  # this page and its ancestors, deepest first
            while entries[chain[-1]].parent is not None:
                chain.append(entries[chain[-1]].parent)
            if any(self.cache.pool.is_pending(link) for link in chain):
                continue
            tokens = [token for link in reversed(chain) for token in entries[link].tokens]
            values = self._k_rows()[page * PS : (page + 1) * PS].tolist()
            assert values == self._expected(tokens, len(tokens))[-PS:], f"page {page}"

    @invariant()
    def live_sequences_read_their_own_context(self) -> None:
        self._check_reads(
            [(s, seq.num_computed) for s, seq in self.live.items() if seq.num_computed]
        )

    def _check_all(self) -> None:
        self.every_page_is_in_exactly_one_state()
        self.pending_pages_are_held_and_cached_pages_indexed()
        self.computed_indexed_pages_hold_what_their_chain_says()
        self.live_sequences_read_their_own_context()

    def teardown(self) -> None:
        # Liveness: with nothing new arriving, waiting on shared pages always ends. A drain
        # step completes at least the first prompt in admission order that does not wait.
        for _ in range(len(self.live)):
            self._step(None)
            self._check_all()
        assert all(seq.is_decoding for seq in self.live.values()), "a prefill never ends"
        for seq_id in list(self.live):
            self._release(seq_id)
        self._check_all()
        stats = self.cache.stats()
        assert stats.pages_in_use == 0
        assert stats.pages_free + stats.pages_cached == NUM_PAGES
        assert pending(self.cache) == {}
        assert indexed(self.cache) == sorted(lru(self.cache))


class CollidingPageCacheMachine(PageCacheMachine):
    """The same, with a page hash that collides all the time: every hit must still verify
    its tokens and its parent page, or a sequence reads another prefix's k/v."""

    def __init__(self) -> None:
        super().__init__()
        weak_hash = lambda parent_hash, tokens: sum(tokens) % 11  # noqa: E731
        self.weak_hash = mock.patch.object(worker.kv.prefix, "page_hash", weak_hash)
        self.weak_hash.start()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            self.weak_hash.stop()


MACHINE_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PageCacheMachine.TestCase.settings = MACHINE_SETTINGS
CollidingPageCacheMachine.TestCase.settings = MACHINE_SETTINGS
# Seconds each (hundreds of generated programs): in `make test`, not `make test-fast`.
test_page_cache_machine = pytest.mark.slow(PageCacheMachine.TestCase)
test_page_cache_machine_with_hash_collisions = pytest.mark.slow(CollidingPageCacheMachine.TestCase)
