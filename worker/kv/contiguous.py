"""ContiguousCache: one fixed slot of max_seq_len positions per sequence, no sharing."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from worker.kv.base import Admission, CacheStats, KVCache, KVStepPlan, KVStorage, NewPages


class ContiguousCache(KVCache):
    """Each sequence owns slot s, rows [s * max_seq_len, (s + 1) * max_seq_len) of a layer.

    Stored as KVStorage with one "page" per slot, so attention sees the same flat rows as
    with the paged cache. Memory is reserved for the longest sequence whether used or not.
    """

    def __init__(self, storage: KVStorage) -> None:
        self.storage = storage
        num_slots, max_seq_len = storage.k.shape[1], storage.k.shape[2]
        self.page_size = max_seq_len
        self._free_slots = list(range(num_slots))
        self._slot_of: dict[int, int] = {}
        self._given: dict[int, int] = {}  # seq_id → the slot it was given since begin_step
        self._peak_in_use = 0

    @property
    def max_tokens_per_seq(self) -> int:
        return self.page_size

    def begin_step(self) -> None:
        """Nothing is shared, so nothing is planned; only the slots given out are noted."""
        self._given.clear()

    def step_plan(self) -> KVStepPlan:
        return KVStepPlan(tuple(NewPages(s, (slot,)) for s, slot in self._given.items()))

    def plan(self, seq_id: int, start: int, end: int) -> None:
        """Each sequence computes into its own slot alone: nothing to note."""

    def admit(
        self, seq_id: int, tokens: Sequence[int], reuse_prefix: bool = True
    ) -> Admission | None:
        if seq_id in self._slot_of:
            raise KeyError(f"sequence {seq_id} already has a slot")
        if not self._free_slots or len(tokens) > self.page_size:
            return None
        self._slot_of[seq_id] = self._given[seq_id] = self._free_slots.pop(0)
        self._peak_in_use = max(self._peak_in_use, len(self._slot_of))
        return Admission(0, 0)

    def _slot(self, seq_id: int) -> int:
        try:
            return self._slot_of[seq_id]
        except KeyError:
            raise KeyError(f"sequence {seq_id} has no slot") from None

    def commit(self, seq_id: int, tokens: Sequence[int], num_computed: int) -> None:
        self._slot(seq_id)  # a slot holds everything: only check the sequence is known

    def grow(self, seq_id: int, num_tokens: int) -> bool:
        self._slot(seq_id)
        return num_tokens <= self.page_size

    def release(self, seq_id: int) -> None:
        slot = self._slot(seq_id)
        del self._slot_of[seq_id]
        self._given.pop(seq_id, None)
        self._free_slots.append(slot)
        self._free_slots.sort()

    def slots(self, seq_id: int, start: int, end: int) -> list[int]:
        base = self._slot(seq_id) * self.page_size
        return list(range(base + start, base + end))

    def read_slots(self, seq_ids: Sequence[int], lengths: Sequence[int]) -> torch.Tensor:
        bases = torch.tensor([self._slot(s) * self.page_size for s in seq_ids])
        return bases[:, None] + torch.arange(max(lengths))[None, :]

    def stats(self) -> CacheStats:
        total = self.storage.k.shape[1]
        return CacheStats(
            pages_total=total,
            pages_in_use=len(self._slot_of),
            pages_cached=0,
            pages_free=total - len(self._slot_of),
            page_size=self.page_size,
            hit_tokens=0,
            bytes_reserved=self.storage.bytes_reserved,
            pages_peak_in_use=self._peak_in_use,
        )
