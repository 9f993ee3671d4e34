"""KvEventRecorder: the prefix index's changes as KV events, collected on the engine thread."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from common.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent, block_hash

# One page as published: (its hash, its parent's hash or None, its tokens).
PageChain = tuple[int, int | None, tuple[int, ...]]

# The recorder sees every page the prefix index takes in or lets go of (PagePool calls it),
# in that order, and keeps each indexed page's chained hash: the published hash of a page
# is always its parent's published hash chained with its own tokens (common/kv_events.py),
# whatever the index uses inside. Events wait in `pending` until the engine thread's flush
# hands them on, one batch per step; nothing here touches a socket.


class KvEventRecorder:
    def __init__(self, block_size: int, medium: str | None = None) -> None:
        self.block_size = block_size
        self.medium = medium
        self._hashes: dict[int, int] = {}  # indexed page → its published hash
        self._parents: dict[int, int | None] = {}  # indexed page → its parent's hash
        self.pending: list[KvEvent] = []
        # The disk tier's events since the last take (pages written, files evicted).
        self.disk_events: Callable[[], list[KvEvent]] | None = None

    def __len__(self) -> int:
        return len(self._hashes)

    def stored(self, page: int, parent: int | None, tokens: Sequence[int]) -> None:
        """`page` joined the index right after `parent` (None: a sequence's first page)."""
        parent_hash = None if parent is None else self._hashes.get(parent)
        if parent is not None and parent_hash is None:
            return  # indexed before the recorder was attached: its chain cannot be named
        page_hash = block_hash(parent_hash, tokens)
        self._hashes[page] = page_hash
        self._parents[page] = parent_hash
        last = self.pending[-1] if self.pending else None
        if isinstance(last, BlockStored) and last.block_hashes[-1] == parent_hash:
            # The next page of the same chain: one event for the run, as vLLM sends them.
            self.pending[-1] = BlockStored(
                (*last.block_hashes, page_hash),
                last.parent_block_hash,
                (*last.token_ids, *tokens),
                self.block_size,
                medium=self.medium,
            )
            return
        self.pending.append(
            BlockStored(
                (page_hash,), parent_hash, tuple(tokens), self.block_size, None, self.medium
            )
        )

    def removed(self, pages: Sequence[int]) -> None:
        """`pages` left the index (evicted, orphaned before being computed)."""
        for page in pages:
            self._parents.pop(page, None)
        hashes = tuple(h for page in pages if (h := self._hashes.pop(page, None)) is not None)
        if not hashes:
            return
        last = self.pending[-1] if self.pending else None
        if isinstance(last, BlockRemoved):
            self.pending[-1] = BlockRemoved((*last.block_hashes, *hashes), self.medium)
        else:
            self.pending.append(BlockRemoved(hashes, self.medium))

    def cleared(self) -> None:
        """The whole index was dropped."""
        self._hashes.clear()
        self._parents.clear()
        self.pending.append(AllBlocksCleared())

    def chain_of(self, page: int, tokens: Sequence[int]) -> PageChain | None:
        """How an indexed page is published (None: not indexed, or its chain unknown)."""
        page_hash = self._hashes.get(page)
        if page_hash is None:
            return None
        return page_hash, self._parents.get(page), tuple(tokens)

    def take(self) -> list[KvEvent]:
        """The events since the last take, in order, then the disk tier's."""
        events, self.pending = self.pending, []
        if self.disk_events is not None:
            events += self.disk_events()
        return events
