"""Allocator: lowest free page first, exact ref counts, LRU of cached pages in release order."""

from __future__ import annotations

import pytest

from worker.kv.allocator import Allocator


def make_allocator(num_pages: int, indexed: set[int]) -> Allocator:
    """An allocator whose pages count as indexed while they are in `indexed`."""
    return Allocator(num_pages, indexed.__contains__)


def state(allocator: Allocator) -> tuple[list[int], list[int], list[int]]:
    """(ref counts, free pages, LRU order), the whole observable state."""
    free = [page for page in range(allocator.num_pages) if allocator.is_free(page)]
    return list(allocator.ref_counts), free, allocator.lru_order()


def test_rejects_an_empty_pool() -> None:
    with pytest.raises(ValueError, match="num_pages must be >= 1, got 0"):
        Allocator(0, lambda page: False)


def test_take_free_hands_out_the_lowest_free_page_first() -> None:
    allocator = make_allocator(4, set())
    assert [allocator.take_free() for _ in range(4)] == [0, 1, 2, 3]
    assert allocator.take_free() is None
    assert state(allocator) == ([1, 1, 1, 1], [], [])
    assert (allocator.num_free, allocator.num_in_use, allocator.num_cached) == (0, 4, 0)

    allocator.release(2)
    allocator.release(1)
    assert state(allocator) == ([1, 0, 0, 1], [1, 2], [])
    assert allocator.take_free() == 1  # the lowest, not the most recently freed
    assert allocator.take_free() == 2


def test_ref_counts_follow_acquire_and_release() -> None:
    allocator = make_allocator(3, set())
    page = allocator.take_free()
    assert page == 0
    allocator.acquire(0)
    allocator.acquire(0)
    assert state(allocator) == ([3, 0, 0], [1, 2], [])
    allocator.release(0)
    allocator.release(0)
    assert state(allocator) == ([1, 0, 0], [1, 2], [])
    assert allocator.num_in_use == 1
    allocator.release(0)
    assert state(allocator) == ([0, 0, 0], [0, 1, 2], [])
    assert (allocator.num_free, allocator.num_in_use, allocator.num_available) == (3, 0, 3)


def test_last_release_caches_an_indexed_page_and_frees_an_unindexed_one() -> None:
    indexed = {0}
    allocator = make_allocator(3, indexed)
    allocator.take_free()
    allocator.take_free()
    allocator.acquire(0)

    allocator.release(0)  # not the last holder: stays in use
    assert state(allocator) == ([1, 1, 0], [2], [])
    allocator.release(0)
    allocator.release(1)
    assert state(allocator) == ([0, 0, 0], [1, 2], [0])
    assert (allocator.num_free, allocator.num_cached, allocator.num_in_use) == (2, 1, 0)
    assert allocator.num_available == 3


def test_lru_evicts_in_release_order_and_a_hit_moves_a_page_to_the_back() -> None:
    indexed = {0, 1, 2, 3}
    allocator = make_allocator(4, indexed)
    for _ in range(4):
        allocator.take_free()
    for page in (2, 0, 3, 1):
        allocator.release(page)
    assert allocator.lru_order() == [2, 0, 3, 1]
    assert allocator.oldest_cached() == 2

    allocator.acquire(0)  # a prefix hit takes the page out of the LRU
    assert state(allocator) == ([1, 0, 0, 0], [], [2, 3, 1])
    allocator.release(0)
    assert allocator.lru_order() == [2, 3, 1, 0]

    allocator.uncache(2)  # evicted: unindexed and free
    assert state(allocator) == ([0, 0, 0, 0], [2], [3, 1, 0])
    assert allocator.oldest_cached() == 3
    assert allocator.take_free() == 2


def test_uncache_leaves_an_in_use_page_alone_and_its_last_release_frees_it() -> None:
    indexed = {0}
    allocator = make_allocator(2, indexed)
    allocator.take_free()
    allocator.uncache(0)
    assert state(allocator) == ([1, 0], [1], [])
    indexed.discard(0)  # what the prefix cache does when it unindexes the page
    allocator.release(0)
    assert state(allocator) == ([0, 0], [0, 1], [])


def test_releasing_more_often_than_acquired_raises_and_changes_nothing() -> None:
    indexed = {1}
    allocator = make_allocator(3, indexed)
    allocator.take_free()
    allocator.take_free()
    allocator.release(0)
    allocator.release(1)
    before = state(allocator)
    with pytest.raises(RuntimeError, match="page 0 released more often than acquired"):
        allocator.release(0)  # free
    with pytest.raises(RuntimeError, match="page 1 released more often than acquired"):
        allocator.release(1)  # cached
    assert state(allocator) == before


def test_acquiring_a_free_page_raises_and_changes_nothing() -> None:
    allocator = make_allocator(2, set())
    allocator.take_free()
    before = state(allocator)
    with pytest.raises(RuntimeError, match="page 1 is free and cannot be shared"):
        allocator.acquire(1)
    assert state(allocator) == before
    assert allocator.take_free() == 1


def test_peak_in_use_remembers_the_high_water_mark() -> None:
    allocator = Allocator(4, lambda page: False)
    pages = [allocator.take_free() for _ in range(3)]
    for page in pages:
        allocator.release(page)
    allocator.take_free()
    assert (allocator.num_in_use, allocator.peak_in_use) == (1, 3)
