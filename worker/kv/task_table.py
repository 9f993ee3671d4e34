"""TaskTable: each sequence's page table, how much of it the cache already held, its rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass
class TaskEntry:
    pages: list[int] = field(default_factory=list)
    num_cached: int = 0  # tokens whose k/v were already computed when the sequence was admitted
    num_shared: int = 0  # tokens in pages matched at admission (computed or being computed)
    num_committed_pages: int = 0  # leading pages whose k/v are complete
    num_indexed_pages: int = 0  # leading pages in the prefix index (matched or our own)
    num_written_pages: int = 0  # of those, the prompt's own: this sequence computes them for all
    # The first tokens of the page after the matched ones, which an indexed page not yet
    # computed at admission begins with too: their rows are copied from it once it is (or
    # read from it in place in the forward that computes it). Counted in num_shared.
    partial_tokens: tuple[int, ...] = ()
    partial_source: int | None = None  # that page
    partial_owner: int | None = None  # the sequence computing it, admitted before this one
    read_from: int | None = None  # that page, read in place in this step's forward
    # The prompt's full pages by their disk-tier names (worker/kv/page_file.py); empty
    # without a disk tier. Each is written there once this sequence computes it.
    digests: list[bytes] = field(default_factory=list)

    def slots(self, start: int, end: int, page_size: int) -> list[int]:
        """Flat cache rows of positions [start, end)."""
        ps = page_size
        return [self.pages[p // ps] * ps + p % ps for p in range(start, end)]

    def drop_partial(self) -> None:
        """The partial rows are this sequence's now (copied), or its own to compute."""
        self.partial_tokens, self.partial_source, self.partial_owner = (), None, None
        self.read_from = None


class TaskTable:
    def __init__(self) -> None:
        self._entries: dict[int, TaskEntry] = {}

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, seq_id: int, entry: TaskEntry) -> None:
        if seq_id in self._entries:
            raise KeyError(f"sequence {seq_id} already has a page table")
        self._entries[seq_id] = entry

    def get(self, seq_id: int) -> TaskEntry:
        try:
            return self._entries[seq_id]
        except KeyError:
            raise KeyError(f"sequence {seq_id} has no page table") from None

    def pop(self, seq_id: int) -> TaskEntry:
        entry = self.get(seq_id)
        del self._entries[seq_id]
        return entry

    def seq_ids(self) -> list[int]:
        return list(self._entries)

    def read_slots(
        self, seq_ids: Sequence[int], lengths: Sequence[int], page_size: int
    ) -> torch.Tensor:
        """(B, max(lengths)) int64 rows of each sequence's context (KVCache.read_slots)."""
        ps = page_size
        longest = max(lengths)
        num_pages = -(-longest // ps)
        rows = []
        in_place: list[tuple[int, int, int, int]] = []  # (row, source page, position, n)
        for seq_id, length in zip(seq_ids, lengths, strict=True):
            entry = self.get(seq_id)
            pages = entry.pages[: -(-length // ps)]
            rows.append(pages + [0] * (num_pages - len(pages)))  # page 0: valid, masked off
            if entry.read_from is not None:
                n = len(entry.partial_tokens)
                in_place.append((len(rows) - 1, entry.read_from, entry.num_shared - n, n))
        # Page-major: each page's rows are consecutive. One tensor and one broadcast add
        # (a gather, a multiply and a modulo over every position cost several times more).
        table = torch.tensor(rows, dtype=torch.int64) * ps  # (B, pages)
        slots = (table[:, :, None] + torch.arange(ps)).view(len(rows), -1)
        for row, source, at, n in in_place:  # rows another sequence computes in this forward
            slots[row, at : at + n] = source * ps + torch.arange(n)
        return slots[:, :longest].contiguous()
