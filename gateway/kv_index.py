"""KvIndex: per worker, the page hashes its KV events say it holds, in step by sequence number."""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from common.kv_events import (
    DISK,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEvent,
    KvEventBatch,
)

# A worker's batches are applied in sequence order, each exactly once: batch n + 1 after
# batch n. A batch that begins with AllBlocksCleared states the whole state from scratch
# (a publisher's first batch, a snapshot), so it is applied whatever came before it. Any
# other batch after a missing one is a gap: the worker is out of step until a replay
# (gateway/kv_subscriber.py) fills it. Events that contradict the state (a page stored
# after a parent it does not hold, a page removed that it does not hold, another page size)
# mean the state is wrong: it is rebuilt from a snapshot. Meanwhile routing reads what is
# there; a wrong guess costs cache hits, never correctness. Pages in a worker's disk tier
# (medium DISK) are a set of their own, checked loosely: the files are shared and evicted by
# more than one writer, so a disk page may come or go without its parent, or twice.


class Applied(enum.Enum):
    APPLIED = "applied"
    REPLAYED = "replayed"  # at or below the last batch applied: already in
    GAP = "gap"  # a batch before it is missing
    INCONSISTENT = "inconsistent"  # it contradicts the state
    UNKNOWN_WORKER = "unknown_worker"  # nobody follows that worker


@dataclass
class WorkerPages:
    block_size: int
    last_seq: int | None = None  # the last batch applied; None: none since the last reset
    in_step: bool = False  # every batch up to last_seq applied
    held: set[int] = field(default_factory=set)
    on_disk: set[int] = field(default_factory=set)  # in its disk tier (read back, not computed)
    # Pages a prompt routed here will hold once the worker admits it (its events follow):
    # hash → until when (monotonic seconds), oldest first.
    expected: OrderedDict[int, float] = field(default_factory=OrderedDict)

    def apply_events(self, events: Sequence[KvEvent]) -> bool:
        """False at the first event that contradicts the state (the rest is not applied)."""
        for event in events:
            if isinstance(event, AllBlocksCleared):
                self.held.clear()
                self.on_disk.clear()
                self.expected.clear()
            elif isinstance(event, BlockStored) and event.medium == DISK:
                if event.block_size != self.block_size:
                    return False
                self.on_disk.update(event.block_hashes)
            elif isinstance(event, BlockRemoved) and event.medium == DISK:
                self.on_disk.difference_update(event.block_hashes)
            elif isinstance(event, BlockStored):
                parent = event.parent_block_hash
                if event.block_size != self.block_size or (
                    parent is not None and parent not in self.held
                ):
                    return False
                self.held.update(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                if not self.held.issuperset(event.block_hashes):
                    return False
                self.held.difference_update(event.block_hashes)
                for page_hash in event.block_hashes:
                    self.expected.pop(page_hash, None)
        return True


class KvIndex:
    def __init__(self, expect_s: float = 10.0, max_expected: int = 100_000) -> None:
        self.expect_s = expect_s
        self.max_expected = max_expected
        self._workers: dict[str, WorkerPages] = {}

    def __contains__(self, worker_id: str) -> bool:
        return worker_id in self._workers

    def track(self, worker_id: str, block_size: int) -> None:
        """Follow a worker anew: nothing known until its events or a snapshot arrive."""
        self._workers[worker_id] = WorkerPages(block_size)

    def forget(self, worker_id: str) -> None:
        self._workers.pop(worker_id, None)

    def get(self, worker_id: str) -> WorkerPages | None:
        return self._workers.get(worker_id)

    def apply(self, worker_id: str, seq: int, batch: KvEventBatch) -> Applied:
        pages = self._workers.get(worker_id)
        if pages is None:
            return Applied.UNKNOWN_WORKER
        if pages.last_seq is not None and seq <= pages.last_seq:
            return Applied.REPLAYED
        starts_clean = bool(batch.events) and isinstance(batch.events[0], AllBlocksCleared)
        if not starts_clean and (pages.last_seq is None or seq != pages.last_seq + 1):
            pages.in_step = False
            return Applied.GAP
        if not pages.apply_events(batch.events):
            pages.last_seq, pages.in_step = None, False
            return Applied.INCONSISTENT
        pages.last_seq = seq
        pages.in_step = pages.in_step or starts_clean
        return Applied.APPLIED

    def mark_in_step(self, worker_id: str) -> None:
        """A replay filled every batch up to the last one applied."""
        pages = self._workers.get(worker_id)
        if pages is not None and pages.last_seq is not None:
            pages.in_step = True

    def mark_out_of_step(self, worker_id: str) -> None:
        pages = self._workers.get(worker_id)
        if pages is not None:
            pages.in_step = False

    def match(self, worker_id: str, hashes: Sequence[int], now: float, disk: bool = False) -> int:
        """How many of a prompt's leading pages the worker holds, or will once it admits a
        prompt routed to it lately; with `disk`, those in its disk tier count too (it reads
        them back rather than compute them)."""
        pages = self._workers.get(worker_id)
        if pages is None:
            return 0
        matched = 0
        for page_hash in hashes:
            held = page_hash in pages.held or (disk and page_hash in pages.on_disk)
            if not held and pages.expected.get(page_hash, 0.0) <= now:
                break
            matched += 1
        return matched

    def expect(self, worker_id: str, hashes: Sequence[int], now: float) -> None:
        """A prompt with these pages was just sent to the worker: count them as its for a
        while, so that the same prefix arriving before the worker's events goes there too."""
        pages = self._workers.get(worker_id)
        if pages is None:
            return
        expected = pages.expected
        while expected and (
            next(iter(expected.values())) <= now or len(expected) > self.max_expected
        ):
            expected.popitem(last=False)
        for page_hash in hashes:
            if page_hash not in pages.held:
                expected[page_hash] = now + self.expect_s
                expected.move_to_end(page_hash)

    def holds_any(self, worker_ids: Sequence[str]) -> bool:
        """Whether any of these workers holds (or is expected to hold) a page at all."""
        return any(
            (pages := self._workers.get(w)) is not None
            and (pages.held or pages.on_disk or pages.expected)
            for w in worker_ids
        )
