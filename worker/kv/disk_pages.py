"""DiskPages: the page cache's side of the disk tier: prompt pages written, and read back."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from worker.kv.base import KVStorage
from worker.kv.disk_tier import DiskTier
from worker.kv.page_file import prompt_digests, tensor_bytes
from worker.kv.page_pool import PagePool

# Every full page of a prompt is written to the tier once computed (write-through, off the
# engine thread), named by its chained digest; a prompt whose next pages miss in memory but
# are on disk gets them read back at admission, into pages indexed as computed.

NO_SEQUENCE = -1  # the holder of pages held only while they are read back from disk


class DiskPages:
    def __init__(self, disk: DiskTier, pool: PagePool, storage: KVStorage, page_size: int) -> None:
        self.disk, self.pool, self.storage, self.page_size = disk, pool, storage, page_size
        self.hit_tokens = 0  # prompt tokens read back instead of computed, cumulative

    def digests(self, tokens: Sequence[int]) -> list[bytes]:
        """The names of the prompt's full pages."""
        return prompt_digests(tokens, len(tokens) // self.page_size, self.page_size)

    def write(self, digest: bytes, page: int, tokens: Sequence[int]) -> None:
        """A computed page to the tier (copied only if the tier takes it); with KV events
        on, its chain goes along, published once the file is written."""
        recorder = self.pool.recorder
        chain = recorder.chain_of(page, tokens) if recorder is not None else None
        self.disk.write(digest, partial(self.storage.page_payload, page), chain)

    def restore(
        self,
        tokens: Sequence[int],
        digests: list[bytes],
        matched: list[int],
        need: int,
        reserve: int,
    ) -> bool:
        """Read the pages right after `matched` back, as far as they are on disk, into new
        pages indexed as computed and left cached; whether any was. Only where the prompt's
        `need` new pages (past `matched`) fit now beside `reserve`: a prompt that must wait
        reads nothing yet."""
        ps, pool = self.page_size, self.pool
        if any(pool.is_pending(page) for page in matched):
            return False
        first = len(matched)
        run = self.disk.count_present(digests[first : (len(tokens) - 1) // ps])
        if not run or not pool.can_allocate(need, matched, reserve):
            return False
        for page in matched:  # so that allocating cannot evict the chain read pages join
            pool.acquire(page)
        pages = pool.allocate(run)
        payload = self.storage.payload_buffer()
        into = tensor_bytes(payload)
        parent, restored = (matched[-1] if matched else None), 0
        try:
            for i, page in enumerate(pages, start=first):
                if not self.disk.read(digests[i], into):
                    break
                self.storage.load_page(page, payload)
                if not pool.index(page, parent, tokens[i * ps : (i + 1) * ps], owner=None):
                    break
                parent, restored = page, restored + 1
        finally:
            # Deepest first, as at release: the chain's tail is evicted before its head.
            for page in reversed(matched + pages):
                pool.release(page, NO_SEQUENCE)
        self.hit_tokens += restored * ps
        return restored > 0
