"""The KVCache interface the scheduler and model runner use, whatever the memory layout."""

from __future__ import annotations

import math
import mmap
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from worker.kv.disk_tier import DiskTier, DiskTierStats
from worker.kv.kv_rows import storage_width

# One layer's cache as flat rows: k and v, each (num_slots, kv_heads, head_dim).
LayerKV = tuple[torch.Tensor, torch.Tensor]


class Admission(NamedTuple):
    """What a newly admitted sequence found in the cache.

    `num_cached_tokens` already have their k/v computed; tokens up to `num_shared_tokens`
    sit in pages another sequence is computing right now (in-flight prefix sharing), so
    this one must not compute them itself.
    """

    num_cached_tokens: int
    num_shared_tokens: int


@dataclass(frozen=True)
class CacheStats:
    pages_total: int
    pages_in_use: int  # held by at least one live sequence
    pages_cached: int  # held by none, still indexed for prefix hits, evictable (LRU)
    pages_free: int
    page_size: int
    hit_tokens: int  # prompt tokens served from the cache instead of computed, cumulative
    bytes_reserved: int  # k + v storage allocated up front
    disk_hit_tokens: int = 0  # of hit_tokens, those read back from the disk tier
    # History, not state, so equality ignores them: the most pages in use at once so far,
    # the prompt tokens of admitted sequences that looked for a prefix, the disk tier's
    # figures (where there is one).
    pages_peak_in_use: int = field(default=0, compare=False)
    query_tokens: int = field(default=0, compare=False)
    disk: DiskTierStats | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ReadInPlace:
    """Rows a sequence shares with a page another sequence computes in the same forward: read
    from that page in this forward, copied into the sequence's own page at commit."""

    seq_id: int
    source_page: int
    position: int  # the sequence's first such position
    num_rows: int


@dataclass(frozen=True, slots=True)
class NewPages:
    """The pages a sequence was given this step (at admission, or grown for its next rows),
    in the order its page table lists them."""

    seq_id: int
    pages: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class KVStepPlan:
    """What a step does in the cache: the pages it gave out, and what its forward shares
    beyond each sequence writing its own rows."""

    allocated: tuple[NewPages, ...] = ()  # per sequence, in the order they first got a page
    computed_pages: frozenset[int] = frozenset()  # full pages others may read in this forward
    reads_in_place: tuple[ReadInPlace, ...] = ()


EMPTY_KV_PLAN = KVStepPlan()


def zeroed(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zero tensor; on the CPU in fresh anonymous memory, which the kernel hands out zeroed
    page by page as it is first written. torch.zeros wrote all of it up front, a large part
    of every start for the default 1 GiB cache (docs/BENCHMARKS.md, Start), and all of it
    resident before a token was cached."""
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        return torch.zeros(shape, dtype=dtype)
    memory = mmap.mmap(-1, nbytes)  # anonymous: zero-filled, kept alive by the tensor
    return torch.frombuffer(memory, dtype=dtype).view(shape)


class KVStorage:
    """k/v tensors `[layers, pages, page_size, kv_heads, head_dim]` (q8_0: head_dim / 32 blocks
    of 34 bytes, worker/kv/kv_rows.py) and flat per-layer views."""

    def __init__(
        self,
        num_layers: int,
        num_pages: int,
        page_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        width = storage_width(head_dim, dtype)  # q8_0 rows are blocks of bytes
        shape = (num_layers, num_pages, page_size, num_kv_heads, width)
        # Zeros, not empty: padded reads of unused rows must never meet a NaN bit pattern.
        self.k = zeroed(shape, dtype, device)
        self.v = zeroed(shape, dtype, device)
        flat = (num_pages * page_size, num_kv_heads, width)
        self.layers: list[LayerKV] = [
            (self.k[i].view(flat), self.v[i].view(flat)) for i in range(num_layers)
        ]

    @property
    def bytes_reserved(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def clear_slots(self, slots: int) -> None:
        """Zeros in the k/v rows of flat slots [0, slots) of every layer (whole pages), and
        nowhere else: zeroing the rest would make all of the cache resident."""
        pages = -(-slots // self.k.shape[2])
        self.k[:, :pages].zero_()
        self.v[:, :pages].zero_()

    def page_payload(self, page: int) -> torch.Tensor:
        """A copy of one page's k and v rows in every layer, (2, layers, page_size, kv_heads,
        head_dim): what the disk tier writes."""
        return torch.stack((self.k[:, page], self.v[:, page])).cpu()

    def payload_buffer(self) -> torch.Tensor:
        """An empty tensor the shape of `page_payload`'s, for `load_page`."""
        return torch.empty((2, *self.k[:, 0].shape), dtype=self.k.dtype)

    def load_page(self, page: int, payload: torch.Tensor) -> None:
        """One page's rows from a `page_payload`."""
        self.k[:, page] = payload[0]
        self.v[:, page] = payload[1]

    def copy_rows(self, src_page: int, dst_page: int, num_rows: int) -> None:
        """The first `num_rows` k/v rows of one page into another, in every layer."""
        self.k[:, dst_page, :num_rows] = self.k[:, src_page, :num_rows]
        self.v[:, dst_page, :num_rows] = self.v[:, src_page, :num_rows]


class KVCache(ABC):
    """Where each sequence's k/v lives. Rows are addressed as flat slots of a layer view.

    The step protocol: the Scheduler (worker/engine/scheduler.py) calls, every step and in
    this order,
      schedule: begin_step → release (each aborted sequence) → admit (each one admitted)
                → grow, or release to preempt (each decode row, oldest first) →
                shared_ready, then plan (each prompt chunk) → grow (drafted rows, where
                pages are free) → step_plan (what all of that gave out and shares)
      update:   commit (each prompt chunk, then each decode row) → release (each sequence
                that finished) → commit (each drafted sequence, what its samples kept)
    In-flight prefix sharing depends on this order: shared_ready lets a sequence start
    after pages another one computes only once they are committed or planned in this same
    forward, so planning starts afresh each step (begin_step) and commits come after the
    forward that computed them; tests/worker/engine/test_step_plans.py fails when it
    changes. Every method either succeeds or leaves the cache untouched.
    """

    page_size: int
    storage: KVStorage
    disk: DiskTier | None = None  # where full pages outlive the process, if anywhere

    @property
    @abstractmethod
    def max_tokens_per_seq(self) -> int:
        """The longest sequence this cache can ever hold alone."""

    @abstractmethod
    def admit(
        self, seq_id: int, tokens: Sequence[int], reuse_prefix: bool = True
    ) -> Admission | None:
        """Reserve room for `tokens`, reusing cached prefix pages unless `reuse_prefix` is
        False (every token then computed: its logits are wanted); None if it does not fit now."""

    def cache_written_tokens(self, seq_id: int) -> int:
        """Prompt tokens of the sequence's own pages that the prefix cache keeps for later
        prompts once computed (Anthropic's cache_creation_input_tokens)."""
        return 0

    @abstractmethod
    def begin_step(self) -> None:
        """A new step's plan starts: nothing given out or planned yet."""

    def shared_ready(self, seq_id: int, start: int) -> int | None:
        """Where this sequence's own computation starts this step, or None to wait a step.

        A sequence sharing pages that another sequence is still filling may start after
        them only once they are computed or planned for this same forward.
        """
        return start

    @abstractmethod
    def plan(self, seq_id: int, start: int, end: int) -> None:
        """Tokens [start, end) of the sequence will be computed in this step's forward."""

    def step_plan(self) -> KVStepPlan:
        """The pages given out since begin_step (to sequences that still hold them), and what
        the prompt chunks planned since then share in the forward."""
        return EMPTY_KV_PLAN

    @abstractmethod
    def commit(self, seq_id: int, tokens: Sequence[int], num_computed: int) -> None:
        """The first `num_computed` tokens now have k/v in the cache."""

    @abstractmethod
    def grow(self, seq_id: int, num_tokens: int) -> bool:
        """Make room for `num_tokens` positions in total; False (untouched) if impossible now."""

    @abstractmethod
    def release(self, seq_id: int) -> None:
        """Give back everything the sequence holds."""

    @abstractmethod
    def slots(self, seq_id: int, start: int, end: int) -> list[int]:
        """Flat cache rows of positions [start, end)."""

    @abstractmethod
    def read_slots(self, seq_ids: Sequence[int], lengths: Sequence[int]) -> torch.Tensor:
        """(B, max(lengths)) int64 rows of each sequence's context; the padding past a
        sequence's length holds valid row numbers, which the attention mask hides."""

    @abstractmethod
    def stats(self) -> CacheStats: ...

    def layer_views(self) -> list[LayerKV]:
        return self.storage.layers

    def close(self) -> None:
        """Finish what outlives the process (the disk tier's queued pages)."""
        if self.disk is not None:
            self.disk.close()
