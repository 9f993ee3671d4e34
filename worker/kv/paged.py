"""PageCache: paged KV storage with prefix sharing across finished and in-flight sequences."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from worker.kv import base
from worker.kv.base import Admission, CacheStats, KVCache, KVStorage, ReadInPlace
from worker.kv.disk_pages import DiskPages
from worker.kv.disk_tier import DiskTier
from worker.kv.page_pool import PagePool
from worker.kv.task_table import TaskEntry, TaskTable

# Reference counts: every page table that lists a page holds one reference to it. Only
# full pages are ever indexed or shared. A prompt's partially filled last page is private
# to its sequence, because that sequence writes its own generated tokens into the rest of
# it. Where a new prompt's next tokens begin like an indexed page (after the same full
# pages), those rows are copied into the new sequence's own page instead of computed: at
# admission when that page is computed, else once it is; in the forward that computes it,
# they are read from it in place and copied after. So a shared system prompt that ends
# mid-page costs no recomputation, even for requests that arrive together with the first.
# With a disk tier, prompt pages also go to disk and come back from it (disk_pages.py).


class PageCache(KVCache):
    def __init__(
        self,
        storage: KVStorage,
        page_size: int,
        max_model_len: int,
        enable_prefix_caching: bool = True,
        watermark: float = 0.01,
        disk: DiskTier | None = None,
    ) -> None:
        num_pages = storage.k.shape[1]
        self.storage = storage
        self.page_size = page_size
        self.pool = PagePool(num_pages, page_size, enable_prefix_caching)
        self.table = TaskTable()
        self.max_model_len = max_model_len
        # Pages admission leaves for running sequences to grow into, to make preemption rare.
        self.watermark_pages = int(watermark * num_pages)
        self._allocated: dict[int, list[int]] = {}  # seq_id → pages given since begin_step
        self._planned: set[int] = set()
        self._reading: list[int] = []  # sequences reading rows in place this step
        self._hit_tokens = 0
        self._query_tokens = 0
        self.disk = disk if enable_prefix_caching else None
        self.disk_pages = DiskPages(self.disk, self.pool, storage, page_size) if self.disk else None

    @property
    def max_tokens_per_seq(self) -> int:
        return min(self.max_model_len, self.pool.num_pages * self.page_size)

    def _num_pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def admit(
        self, seq_id: int, tokens: Sequence[int], reuse_prefix: bool = True
    ) -> Admission | None:
        if seq_id in self.table:  # before any page is taken, so a misuse leaks nothing
            raise KeyError(f"sequence {seq_id} already has a page table")
        ps = self.page_size
        # Never match the last token: its logits have to be computed to sample from.
        max_pages = (len(tokens) - 1) // ps
        matched = self.pool.match(tokens, max_pages) if reuse_prefix else []
        # The watermark is kept for running sequences; with none, it would only keep a
        # prompt that fits the whole cache waiting forever.
        reserve = self.watermark_pages if len(self.table) else 0
        disk = self.disk_pages
        digests = disk.digests(tokens) if disk else []
        need = self._num_pages_for(len(tokens)) - len(matched)
        if disk and reuse_prefix and disk.restore(tokens, digests, matched, need, reserve):
            matched = self.pool.match(tokens, max_pages)
        num_computed_pages = 0
        while num_computed_pages < len(matched) and not self.pool.is_pending(
            matched[num_computed_pages]
        ):
            num_computed_pages += 1
        # Past the last full page that matches, an indexed page may still start the same
        # way (a shared system prompt ending mid-page): its rows need not be computed.
        start = len(matched) * ps
        tail = tokens[start : min(start + ps, len(tokens) - 1)]
        partial = (
            self.pool.partial_match(
                matched[-1] if matched else None, tail, pending_ok=self._computed_without_waiting
            )
            if reuse_prefix
            else None
        )
        copy_now = (
            partial is not None
            and num_computed_pages == len(matched)
            and not self.pool.is_pending(partial[0])
        )
        need = self._num_pages_for(len(tokens)) - len(matched)  # after what was read back
        reusing = [*matched, partial[0]] if partial and copy_now else matched
        if not self.pool.can_allocate(need, reusing, reserve):
            return None
        for page in reusing:  # the partial source too, so allocating cannot evict it
            self.pool.acquire(page)
        pages = matched + self._allocate(seq_id, need)
        num_copied = 0
        if partial is not None and copy_now:
            source, num_copied = partial
            self.storage.copy_rows(source, pages[len(matched)], num_copied)
            self.pool.release(source, seq_id)
        num_cached = num_computed_pages * ps + num_copied
        entry = TaskEntry(
            pages=pages,
            num_cached=num_cached,
            num_shared=max(len(matched) * ps, num_cached),
            num_committed_pages=num_computed_pages,
            num_indexed_pages=len(matched),
            digests=digests,
        )
        if partial is not None and not copy_now:  # taken once the source is computed
            source, n = partial
            entry.partial_tokens = tuple(tail[:n])
            entry.partial_source, entry.partial_owner = source, self.pool.owner_of(source)
            entry.num_shared += n
        self.table.add(seq_id, entry)
        # Index this prompt's own full pages now, pending, so requests that arrive with the
        # same prefix while it is being computed share them instead of computing them again.
        self._index_pages(entry, tokens, len(tokens) // ps, owner=seq_id)
        entry.num_written_pages = entry.num_indexed_pages - len(matched)
        self._hit_tokens += entry.num_shared
        self._query_tokens += len(tokens) if reuse_prefix else 0
        return Admission(entry.num_cached, entry.num_shared)

    def _computed_without_waiting(self, page: int) -> bool:
        """Whether a pending page's owner computes it with no partial page of its own to wait
        for: rows copied from it never wait in a chain (in W2 the tails' own pages began like
        one another's by a token or two more than like the first prompt's, and each waited a
        forward for the last)."""
        owner = self.pool.owner_of(page)
        return owner is not None and not self.table.get(owner).partial_tokens

    def _index_pages(
        self, entry: TaskEntry, tokens: Sequence[int], num_full: int, owner: int | None
    ) -> None:
        ps = self.page_size
        while entry.num_indexed_pages < num_full:
            i = entry.num_indexed_pages
            parent = entry.pages[i - 1] if i else None
            if not self.pool.index(entry.pages[i], parent, tokens[i * ps : (i + 1) * ps], owner):
                return
            entry.num_indexed_pages += 1

    def _allocate(self, seq_id: int, num_pages: int) -> list[int]:
        pages = self.pool.allocate(num_pages)
        self._allocated.setdefault(seq_id, []).extend(pages)
        return pages

    def begin_step(self) -> None:
        self._allocated.clear()
        self._planned.clear()
        self._reading.clear()

    def step_plan(self) -> base.KVStepPlan:
        reads = []
        for seq_id in self._reading:
            entry = self.table.get(seq_id)
            if entry.read_from is not None:
                n = len(entry.partial_tokens)
                reads.append(ReadInPlace(seq_id, entry.read_from, entry.num_shared - n, n))
        allocated = tuple(base.NewPages(s, tuple(p)) for s, p in self._allocated.items() if p)
        return base.KVStepPlan(allocated, frozenset(self._planned), tuple(reads))

    def shared_ready(self, seq_id: int, start: int) -> int | None:
        entry = self.table.get(seq_id)
        ps = self.page_size
        pos = start
        matched_end = entry.num_shared - len(entry.partial_tokens)
        while pos < matched_end:
            page = entry.pages[pos // ps]
            if not self.pool.is_pending(page) or page in self._planned:
                pos = (pos // ps + 1) * ps
                continue
            if self.pool.owner_of(page) is not None:
                return None  # its owner computes it in a later step: wait for it
            # Orphaned: its owner left before computing it. Compute it, and the rest, here;
            # those tokens were counted as hits at admission and no longer are.
            self.pool.adopt(page, seq_id)
            self._share_less(entry, entry.num_shared - pos)
            entry.num_indexed_pages = min(entry.num_indexed_pages, pos // ps)
            return pos
        if entry.partial_tokens and pos == matched_end:
            ready = self._take_partial(entry, pos)
            if entry.read_from is not None:
                self._reading.append(seq_id)
            return ready
        return pos

    def _take_partial(self, entry: TaskEntry, pos: int) -> int | None:
        """Where the sequence computes from, its partial rows copied or read in place; None
        while the page they come from is computed in a later step."""
        n = len(entry.partial_tokens)
        source, owner = entry.partial_source, entry.partial_owner
        if source is not None and owner is not None and self.pool.owner_of(source) == owner:
            # Still its owner's to compute, admitted before this sequence: never a wait in
            # a circle (a page indexed since could belong to one that waits for this one).
            if source not in self._planned:
                return None
            entry.read_from = source  # computed in this forward: read there, copied at commit
            return pos + n
        # Its owner computed it, or left: any computed page that starts the same way (never
        # this sequence's own, pending until it computes past these rows).
        ps = self.page_size
        parent = entry.pages[pos // ps - 1] if pos else None
        found = self.pool.partial_match(parent, entry.partial_tokens)
        if found is None:
            self._share_less(entry, n)
            return pos
        source, copied = found
        self._share_less(entry, n - copied)
        self.storage.copy_rows(source, entry.pages[pos // ps], copied)
        entry.drop_partial()
        return pos + copied

    def _share_less(self, entry: TaskEntry, num_tokens: int) -> None:
        """`num_tokens` of the shared ones are the sequence's own to compute after all."""
        self._hit_tokens -= num_tokens
        entry.num_shared -= num_tokens
        if num_tokens >= len(entry.partial_tokens):
            entry.drop_partial()
        else:
            entry.partial_tokens = entry.partial_tokens[: len(entry.partial_tokens) - num_tokens]

    def plan(self, seq_id: int, start: int, end: int) -> None:
        entry = self.table.get(seq_id)
        for i in range(start // self.page_size, end // self.page_size):
            self._planned.add(entry.pages[i])
        if entry.read_from is not None:
            # Its first rows are copied only after the forward: others may not read it in it.
            self._planned.discard(entry.pages[start // self.page_size])

    def commit(self, seq_id: int, tokens: Sequence[int], num_computed: int) -> None:
        entry = self.table.get(seq_id)
        if entry.read_from is not None:  # the forward computed them: now they are ours
            partial_start = entry.num_shared - len(entry.partial_tokens)
            page = entry.pages[partial_start // self.page_size]
            self.storage.copy_rows(entry.read_from, page, len(entry.partial_tokens))
            entry.drop_partial()
        num_full = num_computed // self.page_size
        for i in range(entry.num_committed_pages, num_full):
            self.pool.mark_computed(entry.pages[i])
            if self.disk_pages is not None and i < len(entry.digests):
                page_tokens = tokens[i * self.page_size : (i + 1) * self.page_size]
                self.disk_pages.write(entry.digests[i], entry.pages[i], page_tokens)
        entry.num_committed_pages = max(entry.num_committed_pages, num_full)
        # Pages completed by decoding (or after a lost index) join the index computed.
        self._index_pages(entry, tokens, num_full, owner=None)

    def grow(self, seq_id: int, num_tokens: int) -> bool:
        entry = self.table.get(seq_id)
        need = self._num_pages_for(num_tokens) - len(entry.pages)
        if need <= 0:
            return True
        if not self.pool.can_allocate(need):
            return False
        entry.pages.extend(self._allocate(seq_id, need))
        return True

    def release(self, seq_id: int) -> None:
        entry = self.table.pop(seq_id)
        self._allocated.pop(seq_id, None)
        # Deepest page first, so a chain's tail is evicted before its head.
        for page in reversed(entry.pages):
            self.pool.release(page, seq_id)

    def cache_written_tokens(self, seq_id: int) -> int:
        return self.table.get(seq_id).num_written_pages * self.page_size

    def pages_of(self, seq_id: int) -> list[int]:
        return list(self.table.get(seq_id).pages)

    def slots(self, seq_id: int, start: int, end: int) -> list[int]:
        return self.table.get(seq_id).slots(start, end, self.page_size)

    def read_slots(self, seq_ids: Sequence[int], lengths: Sequence[int]) -> torch.Tensor:
        return self.table.read_slots(seq_ids, lengths, self.page_size)

    def stats(self) -> CacheStats:
        allocator = self.pool.allocator
        return CacheStats(
            pages_total=allocator.num_pages,
            pages_in_use=allocator.num_in_use,
            pages_cached=allocator.num_cached,
            pages_free=allocator.num_free,
            page_size=self.page_size,
            hit_tokens=self._hit_tokens,
            bytes_reserved=self.storage.bytes_reserved,
            pages_peak_in_use=allocator.peak_in_use,
            query_tokens=self._query_tokens,
            disk_hit_tokens=self.disk_pages.hit_tokens if self.disk_pages else 0,
            disk=self.disk.stats() if self.disk is not None else None,
        )
