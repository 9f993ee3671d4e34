"""PagePool: page allocation plus prefix matching, including pages still being computed."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from worker.kv.allocator import Allocator
from worker.kv.kv_events import KvEventRecorder
from worker.kv.prefix import ROOT_HASH, PrefixCache

# A page is *pending* while its k/v are not computed yet. Pending pages of a prompt are
# indexed at admission so that requests arriving together share them; each has an owner,
# the sequence that will compute it. An owner that leaves before computing its pending
# pages orphans them: they leave the index (their contents are not valid), and a sequence
# still holding one adopts it and computes it itself. A pending page never becomes cached.


class PagePool:
    def __init__(self, num_pages: int, page_size: int, enable_prefix_caching: bool = True) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.page_size = page_size
        self.enable_prefix_caching = enable_prefix_caching
        self.prefix = PrefixCache()
        self.allocator = Allocator(num_pages, self.prefix.is_indexed)
        self._pending: dict[int, int | None] = {}  # page → owner sequence (None: orphaned)
        # Told of every page indexed and unindexed (the worker publishes them as KV events).
        self.recorder: KvEventRecorder | None = None

    @property
    def num_pages(self) -> int:
        return self.allocator.num_pages

    # -- prefix matching ------------------------------------------------------------
    def match(self, tokens: Sequence[int], max_pages: int) -> list[int]:
        """The longest chain of indexed pages holding `tokens`' first full pages."""
        if not self.enable_prefix_caching:
            return []
        ps = self.page_size
        pages: list[int] = []
        parent: int | None = None
        parent_hash = ROOT_HASH
        for i in range(max_pages):
            page = self.prefix.lookup(parent, parent_hash, tokens[i * ps : (i + 1) * ps])
            if page is None:
                break
            pages.append(page)
            parent, parent_hash = page, self.prefix.hash_of(page)
        return pages

    def partial_match(
        self,
        parent: int | None,
        tokens: Sequence[int],
        pending_ok: Callable[[int], bool] | None = None,
    ) -> tuple[int, int] | None:
        """(page, n): an indexed page after `parent` whose first n >= 1 tokens are `tokens`'
        first n, n as large as possible (a computed page where two match as far); None when
        no page starts like `tokens`. Computed pages, and pending ones that `pending_ok`
        accepts."""
        if not self.enable_prefix_caching or not tokens:
            return None
        best: tuple[int, int] | None = None
        for page, page_tokens in self.prefix.children(parent):
            is_pending = page in self._pending
            if is_pending and (pending_ok is None or not pending_ok(page)):
                continue
            n = 0
            for ours, theirs in zip(tokens, page_tokens, strict=False):
                if ours != theirs:
                    break
                n += 1
            if n == 0 or (best is not None and n < best[1]):
                continue
            if best is None or n > best[1] or not is_pending:
                best = (page, n)
        return best

    def index(
        self, page: int, parent: int | None, tokens: Sequence[int], owner: int | None
    ) -> bool:
        """Index a full page after `parent`; with an owner it is pending until computed."""
        if not self.enable_prefix_caching or not self.prefix.insert(page, parent, tokens):
            return False
        if self.recorder is not None:
            self.recorder.stored(page, parent, tokens)
        if owner is not None:
            self._pending[page] = owner
        return True

    def unindex(self, page: int) -> None:
        removed = self.prefix.remove(page)
        if self.recorder is not None:
            self.recorder.removed(removed)
        for each in removed:
            self.allocator.uncache(each)

    # -- pending pages ----------------------------------------------------------------
    def is_pending(self, page: int) -> bool:
        return page in self._pending

    def owner_of(self, page: int) -> int | None:
        return self._pending.get(page)

    def adopt(self, page: int, seq_id: int) -> None:
        self._pending[page] = seq_id

    def mark_computed(self, page: int) -> None:
        self._pending.pop(page, None)

    # -- allocation -------------------------------------------------------------------
    def can_allocate(self, num_pages: int, reusing: Sequence[int] = (), reserve: int = 0) -> bool:
        """Whether `num_pages` new pages fit after acquiring `reusing` and keeping `reserve`."""
        reused_cached = sum(1 for page in reusing if self.allocator.ref_counts[page] == 0)
        return num_pages + reserve <= self.allocator.num_available - reused_cached

    def allocate(self, num_pages: int) -> list[int]:
        """`num_pages` pages, free ones first, then evicting the least recently cached."""
        if num_pages > self.allocator.num_available:
            raise RuntimeError(
                f"allocate({num_pages}) with only {self.allocator.num_available} available"
            )
        pages: list[int] = []
        while len(pages) < num_pages:
            page = self.allocator.take_free()
            if page is None:
                oldest = self.allocator.oldest_cached()
                assert oldest is not None, "num_available counted a page that is not there"
                self.unindex(oldest)
                continue
            pages.append(page)
        return pages

    def acquire(self, page: int) -> None:
        self.allocator.acquire(page)

    def release(self, page: int, seq_id: int) -> None:
        """`seq_id` lets go of `page`; pages it still owed are orphaned first."""
        if page in self._pending and self._pending[page] == seq_id:
            self._pending[page] = None
            self.unindex(page)
        self.allocator.release(page)
        if self.allocator.ref_counts[page] == 0:
            self._pending.pop(page, None)
