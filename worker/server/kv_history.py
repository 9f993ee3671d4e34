"""KvHistory: what a KV-event publisher sent, numbered, for replay; and the pages it leaves held."""

from __future__ import annotations

from collections import deque

from common.kv_events import (
    DISK,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEvent,
    KvEventBatch,
    encode_batch,
)

# Sequence numbers count batches from 0, one per batch published, with no gaps. The
# publisher's first batch is AllBlocksCleared: a subscriber replaying from 0 rebuilds the
# state from an empty cache. `held` is the state after batch `last_seq`: every page hash the
# worker holds with its parent and tokens, parents before children (a page is stored only
# after its parent, and removing a page removes its descendants too), so a snapshot lists
# them in an order a subscriber can apply. Pages in the disk tier (medium DISK) are kept
# apart: a page may be in memory, on disk or both, and a snapshot lists each where it is.


class KvHistory:
    def __init__(
        self,
        block_size: int,
        medium: str | None = None,
        max_batches: int = 4096,
        snapshot_pages: int = 4096,
    ) -> None:
        self.block_size = block_size
        self.medium = medium
        self.snapshot_pages = snapshot_pages
        self.last_seq = -1
        self._batches: deque[tuple[int, bytes]] = deque(maxlen=max_batches)
        self._held: dict[int, tuple[int | None, tuple[int, ...]]] = {}
        self._on_disk: dict[int, tuple[int | None, tuple[int, ...]]] = {}  # medium DISK

    @property
    def num_held(self) -> int:
        return len(self._held)

    def record(self, batch: KvEventBatch) -> tuple[int, bytes]:
        """Number and encode the next batch; (sequence number, payload) to publish."""
        for event in batch.events:
            self._apply(event)
        self.last_seq += 1
        payload = encode_batch(batch)
        self._batches.append((self.last_seq, payload))
        return self.last_seq, payload

    def _apply(self, event: KvEvent) -> None:
        if isinstance(event, BlockStored):
            held = self._on_disk if event.medium == DISK else self._held
            parent, size = event.parent_block_hash, event.block_size
            for i, page_hash in enumerate(event.block_hashes):
                held[page_hash] = (parent, event.token_ids[i * size : (i + 1) * size])
                parent = page_hash
        elif isinstance(event, BlockRemoved):
            held = self._on_disk if event.medium == DISK else self._held
            for page_hash in event.block_hashes:
                held.pop(page_hash, None)
        else:
            self._held.clear()
            self._on_disk.clear()

    def replay(self, start: int, now: float) -> list[tuple[int, bytes]]:
        """What a subscriber that has every batch before `start` needs: the batches from
        `start` on while they are all still kept, else a snapshot. Nothing if `start` is
        past the last batch."""
        if start > self.last_seq:
            return []
        if self._batches and start >= 0 and self._batches[0][0] <= start:
            return [(seq, payload) for seq, payload in self._batches if seq >= start]
        return self.snapshot(now)

    def snapshot(self, now: float) -> list[tuple[int, bytes]]:
        """The state after the last batch, as batches all numbered `last_seq`: the first
        begins with AllBlocksCleared, then every held page, each run of a chain one
        BlockStored; at most `snapshot_pages` pages a batch."""
        chunks: list[list[KvEvent]] = [[AllBlocksCleared()]]
        num_pages = 0
        for medium, held in ((self.medium, self._held), (DISK, self._on_disk)):
            for page_hash, (parent, tokens) in held.items():
                if num_pages == self.snapshot_pages:
                    chunks.append([])
                    num_pages = 0
                events = chunks[-1]
                last = events[-1] if events else None
                if (
                    isinstance(last, BlockStored)
                    and last.medium == medium
                    and last.block_hashes[-1] == parent
                ):
                    events[-1] = BlockStored(
                        (*last.block_hashes, page_hash),
                        last.parent_block_hash,
                        (*last.token_ids, *tokens),
                        self.block_size,
                        medium=medium,
                    )
                else:
                    events.append(
                        BlockStored((page_hash,), parent, tokens, self.block_size, None, medium)
                    )
                num_pages += 1
        return [
            (self.last_seq, encode_batch(KvEventBatch(now, tuple(events)))) for events in chunks
        ]
