"""Prefix index over full pages: a hash chained over the previous page's hash, verified on hit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Invariant: an indexed page's parent is indexed too, as that very physical page. A hit
# checks this page's tokens and that its recorded parent is the page matched one step
# earlier, so by induction a hit means the whole prefix is identical; a hash collision or
# a different earlier prefix can never hand out a page. Unindexing a page therefore
# unindexes all its descendants.

ROOT_HASH = 0


def page_hash(parent_hash: int, tokens: Sequence[int]) -> int:
    """Chained hash of one page: its parent's hash and its own tokens."""
    return hash((parent_hash, tuple(tokens)))


@dataclass(frozen=True)
class IndexedPage:
    hash: int
    parent: int | None  # page id of the previous page; None for a sequence's first page
    tokens: tuple[int, ...]


class PrefixCache:
    def __init__(self) -> None:
        self._by_hash: dict[int, int] = {}
        self._pages: dict[int, IndexedPage] = {}
        self._children: dict[int | None, set[int]] = {}  # None: first pages of sequences

    def __len__(self) -> int:
        return len(self._pages)

    def is_indexed(self, page: int) -> bool:
        return page in self._pages

    def hash_of(self, page: int) -> int:
        return self._pages[page].hash

    def children(self, parent: int | None) -> list[tuple[int, tuple[int, ...]]]:
        """(page, tokens) of every indexed page chained right after `parent`."""
        return [(page, self._pages[page].tokens) for page in self._children.get(parent, ())]

    def lookup(self, parent: int | None, parent_hash: int, tokens: Sequence[int]) -> int | None:
        """The indexed page holding `tokens` right after `parent`, or None."""
        key = page_hash(parent_hash, tokens)
        page = self._by_hash.get(key)
        if page is None:
            return None
        entry = self._pages[page]
        if entry.parent != parent or entry.tokens != tuple(tokens):
            return None
        return page

    def insert(self, page: int, parent: int | None, tokens: Sequence[int]) -> bool:
        """Index `page` after `parent`; False (nothing changes) if the chain cannot hold it."""
        if page in self._pages:
            return False
        if parent is not None and parent not in self._pages:
            return False
        parent_hash = ROOT_HASH if parent is None else self._pages[parent].hash
        key = page_hash(parent_hash, tokens)
        if key in self._by_hash:  # the same content is indexed already (or a collision)
            return False
        self._by_hash[key] = page
        self._pages[page] = IndexedPage(key, parent, tuple(tokens))
        self._children.setdefault(parent, set()).add(page)
        return True

    def remove(self, page: int) -> list[int]:
        """Unindex `page` and every page chained after it; returns them, deepest first."""
        if page not in self._pages:
            return []
        subtree = [page]  # breadth first, so reversed it lists children before parents
        for node in subtree:
            subtree.extend(sorted(self._children.pop(node, ())))
        entry = self._pages[page]
        siblings = self._children[entry.parent]
        siblings.discard(page)
        if not siblings:
            del self._children[entry.parent]
        for node in subtree:
            del self._by_hash[self._pages.pop(node).hash]
        return subtree[::-1]
