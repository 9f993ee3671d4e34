"""Page allocator: a free-page bitmask, reference counts and an LRU of evictable pages."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

# Invariant, for every page at every moment, exactly one of:
#   free       ref == 0, bit set in the free mask, not in the LRU
#   in use     ref >= 1 (one per page table holding it), not in the mask, not in the LRU
#   cached     ref == 0, in the LRU (still indexed by the prefix cache), not in the mask
# A page enters the LRU only on its last release while indexed; eviction takes the least
# recently released first.


class Allocator:
    def __init__(self, num_pages: int, is_indexed: Callable[[int], bool]) -> None:
        if num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {num_pages}")
        self.num_pages = num_pages
        self.ref_counts = [0] * num_pages
        self._free_mask = (1 << num_pages) - 1
        self._num_free = num_pages
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._is_indexed = is_indexed
        self.peak_in_use = 0

    @property
    def num_free(self) -> int:
        return self._num_free

    @property
    def num_cached(self) -> int:
        return len(self._lru)

    @property
    def num_available(self) -> int:
        """Pages an allocation may take: free ones plus evictable cached ones."""
        return self._num_free + len(self._lru)

    @property
    def num_in_use(self) -> int:
        return self.num_pages - self._num_free - len(self._lru)

    def is_free(self, page: int) -> bool:
        return bool(self._free_mask >> page & 1)

    def lru_order(self) -> list[int]:
        """Cached pages, next to be evicted first."""
        return list(self._lru)

    def take_free(self) -> int | None:
        """The lowest-numbered free page, now referenced once; None if there is none."""
        if not self._free_mask:
            return None
        page = (self._free_mask & -self._free_mask).bit_length() - 1
        self._free_mask &= ~(1 << page)
        self._num_free -= 1
        self.ref_counts[page] = 1
        self.peak_in_use = max(self.peak_in_use, self.num_in_use)
        return page

    def oldest_cached(self) -> int | None:
        return next(iter(self._lru), None)

    def acquire(self, page: int) -> None:
        """One more holder for an in-use or cached page (a prefix hit)."""
        if self.is_free(page):
            raise RuntimeError(f"page {page} is free and cannot be shared")
        self._lru.pop(page, None)
        self.ref_counts[page] += 1
        self.peak_in_use = max(self.peak_in_use, self.num_in_use)

    def release(self, page: int) -> None:
        """One holder fewer; the last release caches an indexed page and frees any other."""
        if self.ref_counts[page] < 1:
            raise RuntimeError(f"page {page} released more often than acquired")
        self.ref_counts[page] -= 1
        if self.ref_counts[page] == 0:
            if self._is_indexed(page):
                self._lru[page] = None
            else:
                self._set_free(page)

    def uncache(self, page: int) -> None:
        """A cached page lost its index entry: it becomes free. In-use pages are unaffected."""
        if page in self._lru:
            del self._lru[page]
            self._set_free(page)

    def _set_free(self, page: int) -> None:
        self._free_mask |= 1 << page
        self._num_free += 1
