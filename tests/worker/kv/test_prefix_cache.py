"""PrefixCache: the hash chain, verified hits, refused inserts and cascading removal."""

from __future__ import annotations

import pytest

import worker.kv.prefix
from worker.kv.prefix import ROOT_HASH, PrefixCache, page_hash

A = (1, 2, 3, 4)
B = (5, 6, 7, 8)
C = (9, 9, 9, 9)


def make_chain(*pages: tuple[int, ...]) -> PrefixCache:
    """Pages 0, 1, ... indexed as one chain holding `pages` in order."""
    prefix = PrefixCache()
    for page, tokens in enumerate(pages):
        assert prefix.insert(page, page - 1 if page else None, tokens)
    return prefix


def test_hash_chains_over_the_parent_page_hash() -> None:
    prefix = make_chain(A, B)
    assert prefix.hash_of(0) == page_hash(ROOT_HASH, A)
    assert prefix.hash_of(1) == page_hash(page_hash(ROOT_HASH, A), B)
    assert prefix.hash_of(1) != page_hash(ROOT_HASH, B)
    assert len(prefix) == 2


def test_lookup_walks_the_chain() -> None:
    prefix = make_chain(A, B)
    assert prefix.lookup(None, ROOT_HASH, A) == 0
    assert prefix.lookup(0, prefix.hash_of(0), B) == 1
    assert prefix.lookup(0, prefix.hash_of(0), list(B)) == 1  # any sequence of tokens
    assert prefix.lookup(None, ROOT_HASH, B) is None
    assert prefix.lookup(1, prefix.hash_of(1), A) is None


def test_lookup_verifies_the_parent_page_not_only_the_hash() -> None:
    prefix = make_chain(A, B)
    # The right parent hash with a different parent page must not hit.
    assert prefix.lookup(7, prefix.hash_of(0), B) is None
    assert prefix.lookup(None, prefix.hash_of(0), B) is None


def test_equal_tokens_after_a_different_earlier_prefix_never_match() -> None:
    prefix = make_chain(A, B)
    assert prefix.insert(2, None, C)
    assert prefix.lookup(2, prefix.hash_of(2), B) is None
    # Indexed after its own parent, the same tokens form a separate entry.
    assert prefix.insert(3, 2, B)
    assert prefix.lookup(2, prefix.hash_of(2), B) == 3
    assert prefix.lookup(0, prefix.hash_of(0), B) == 1


def test_a_hash_collision_never_returns_a_wrong_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.kv.prefix, "page_hash", lambda parent_hash, tokens: 42)
    prefix = PrefixCache()
    assert prefix.insert(0, None, A)
    assert prefix.hash_of(0) == 42
    assert prefix.lookup(None, ROOT_HASH, B) is None  # same hash, other tokens
    assert prefix.lookup(5, 42, A) is None  # same hash and tokens, other parent
    assert prefix.lookup(None, ROOT_HASH, A) == 0
    # A colliding page is refused, not indexed over the first one.
    assert not prefix.insert(1, None, B)
    assert not prefix.insert(1, 0, A)
    assert len(prefix) == 1
    assert prefix.lookup(0, 42, A) is None
    assert not prefix.is_indexed(1)


def test_insert_refuses_an_unindexed_parent_a_known_page_and_known_content() -> None:
    prefix = make_chain(A)
    assert not prefix.insert(1, 5, B)  # parent 5 is not indexed
    assert not prefix.insert(0, None, C)  # page 0 is indexed already
    assert not prefix.insert(1, None, A)  # the same content sits in page 0
    assert len(prefix) == 1
    assert [prefix.is_indexed(page) for page in range(3)] == [True, False, False]
    assert prefix.lookup(None, ROOT_HASH, C) is None


def test_remove_cascades_to_descendants_deepest_first() -> None:
    prefix = make_chain(A, B, C)  # 0 → 1 → 2
    assert prefix.insert(3, 0, C)  # 0 → 3
    assert prefix.insert(4, 3, A)  # 0 → 3 → 4
    assert prefix.insert(5, None, B)  # another root
    assert prefix.remove(0) == [4, 2, 3, 1, 0]
    assert len(prefix) == 1
    assert [prefix.is_indexed(page) for page in range(6)] == [False] * 5 + [True]
    assert prefix.lookup(None, ROOT_HASH, A) is None
    assert prefix.lookup(None, ROOT_HASH, B) == 5
    # The removed content can be indexed again, in other pages.
    assert prefix.insert(6, None, A)
    assert prefix.insert(7, 6, B)
    assert prefix.lookup(6, prefix.hash_of(6), B) == 7


def test_remove_of_a_middle_page_keeps_its_ancestors_and_siblings() -> None:
    prefix = make_chain(A, B, C)  # 0 → 1 → 2
    assert prefix.insert(3, 0, C)  # 0 → 3
    assert prefix.remove(1) == [2, 1]
    assert [prefix.is_indexed(page) for page in range(4)] == [True, False, False, True]
    assert prefix.lookup(0, prefix.hash_of(0), C) == 3
    assert prefix.remove(3) == [3]
    assert prefix.remove(0) == [0]  # its child lists are empty and gone
    assert len(prefix) == 0


def test_remove_of_an_unindexed_page_is_a_no_op() -> None:
    prefix = make_chain(A)
    assert prefix.remove(3) == []
    assert len(prefix) == 1
