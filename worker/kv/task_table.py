"""TaskTable: each sequence's page table and how much of it the cache already held."""

from __future__ import annotations

from dataclasses import dataclass, field


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
