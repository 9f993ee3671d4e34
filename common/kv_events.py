"""KV-cache events on the wire (vLLM's KVEventBatch shape) and the page hash both sides compute."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

# The shape is vLLM's array-like msgpack one (docs/KV_EVENTS.md): a batch is
# [ts, [event, …]], an event a list whose first item names its type. Hashes are unsigned
# 64-bit integers, chained: a page's hash covers its parent's hash and its own token ids, so
# equal hashes mean equal prefixes, and a router computes them from a prompt's token ids.

DISK = "DISK"  # the medium of a page in a worker's disk tier (beside "CPU" or "GPU" memory)
STORED = "BlockStored"
REMOVED = "BlockRemoved"
CLEARED = "AllBlocksCleared"
END_SEQ = (-1).to_bytes(8, "big", signed=True)  # the replay socket's last answer
MAX_EVENT_FRAME_BYTES = 64 << 20  # a snapshot is split well below this (KvHistory)


class KvEventError(ValueError):
    """A frame or batch that is not a well-formed KV event message; `reason` is the count's
    name in the dropped-frame statistics."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class BlockStored:
    """Pages now held, chained: the first one's parent is `parent_block_hash` (None: the
    prompt's first page), each next one's the hash before it. `token_ids` are all of theirs,
    `block_size` per page."""

    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None


@dataclass(frozen=True)
class BlockRemoved:
    """Pages no longer held (evicted, or never computed after all)."""

    block_hashes: tuple[int, ...]
    medium: str | None = None


@dataclass(frozen=True)
class AllBlocksCleared:
    """Nothing is held any more (a publisher's first batch says so: a new cache is empty)."""


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True)
class KvEventBatch:
    """The events of one scheduler step, in order; `ts` in seconds since the epoch."""

    ts: float
    events: tuple[KvEvent, ...]


# -- the page hash -----------------------------------------------------------------------------
def block_hash(parent: int | None, token_ids: Sequence[int]) -> int:
    """One page's hash: the first 8 bytes (big-endian) of SHA-256 over the parent's hash as
    8 bytes big-endian (0 for a first page) and each token id as 4 bytes big-endian."""
    data = struct.pack(f">Q{len(token_ids)}I", parent or 0, *token_ids)
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def prompt_block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """The chained hashes of the full pages of a prompt, as its worker indexes them."""
    hashes: list[int] = []
    parent: int | None = None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = block_hash(parent, token_ids[start : start + block_size])
        hashes.append(parent)
    return hashes


# -- encoding ------------------------------------------------------------------------------------
def encode_batch(batch: KvEventBatch) -> bytes:
    payload: bytes = msgpack.packb([batch.ts, [_event_fields(event) for event in batch.events]])
    return payload


def _event_fields(event: KvEvent) -> list[Any]:
    if isinstance(event, BlockStored):
        return [
            STORED,
            list(event.block_hashes),
            event.parent_block_hash,
            list(event.token_ids),
            event.block_size,
            event.lora_id,
            event.medium,
        ]
    if isinstance(event, BlockRemoved):
        return [REMOVED, list(event.block_hashes), event.medium]
    return [CLEARED]


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "big", signed=True)


# -- decoding, every field checked -------------------------------------------------------------
def decode_seq(frame: bytes) -> int:
    if len(frame) != 8:
        raise KvEventError("kv_framing", f"a sequence number is 8 bytes, got {len(frame)}")
    return int.from_bytes(frame, "big", signed=True)


def decode_batch(payload: bytes) -> KvEventBatch:
    """The batch, or KvEventError("kv_malformed"). Fields a newer publisher appends (vLLM's
    data_parallel_rank, lora_name, extra_keys, …) are ignored."""
    try:
        raw = msgpack.unpackb(payload, strict_map_key=False)
    except Exception as exc:  # msgpack raises several types for bad bytes
        raise KvEventError("kv_malformed", f"not msgpack: {exc}") from None
    if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
        raise KvEventError("kv_malformed", "a batch is [ts, [events]]")
    ts = raw[0]
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        raise KvEventError("kv_malformed", f"ts must be a number, got {ts!r}")
    return KvEventBatch(float(ts), tuple(_decode_event(item) for item in raw[1]))


def _decode_event(item: object) -> KvEvent:
    if not isinstance(item, list) or not item or not isinstance(item[0], str):
        raise KvEventError("kv_malformed", f"an event is [type, fields…], got {item!r:.80}")
    kind, fields = item[0], item[1:]
    if kind == STORED and len(fields) >= 4:
        hashes, parent, tokens, size = fields[:4]
        lora_id = fields[4] if len(fields) > 4 else None
        medium = fields[5] if len(fields) > 5 else None
        stored = BlockStored(
            _hashes(hashes),
            None if parent is None else _hash(parent),
            _ints(tokens, "token_ids"),
            _positive(size),
            _optional(lora_id, int, "lora_id"),
            _optional(medium, str, "medium"),
        )
        if len(stored.token_ids) != len(stored.block_hashes) * stored.block_size:
            raise KvEventError("kv_malformed", "token_ids must fill block_size per hash")
        return stored
    if kind == REMOVED and len(fields) >= 1:
        medium = fields[1] if len(fields) > 1 else None
        return BlockRemoved(_hashes(fields[0]), _optional(medium, str, "medium"))
    if kind == CLEARED:
        return AllBlocksCleared()
    raise KvEventError("kv_malformed", f"unknown event {kind!r} with {len(fields)} fields")


def _hash(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
        raise KvEventError("kv_malformed", f"a block hash is an unsigned 64-bit int: {value!r}")
    return value


def _hashes(value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise KvEventError("kv_malformed", "block_hashes must be a non-empty list")
    return tuple(_hash(item) for item in value)


def _ints(value: object, name: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(
        isinstance(item, bool) or not isinstance(item, int) for item in value
    ):
        raise KvEventError("kv_malformed", f"{name} must be a list of ints")
    return tuple(value)


def _positive(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KvEventError("kv_malformed", f"block_size must be an int >= 1, got {value!r}")
    return value


def _optional(value: object, kind: type, name: str) -> Any:
    if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
        raise KvEventError("kv_malformed", f"{name} must be {kind.__name__} or nil: {value!r}")
    return value
