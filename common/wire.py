"""msgpack codec for the wire messages; malformed input is a WireError, never a crash."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections import Counter
from functools import cache
from typing import Any

import msgpack

from common.schemas import MESSAGE_TYPES, PROTOCOL_VERSION, Message

DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
# A worker batches the events of one step into one multipart message, each part a whole
# wire message; the gateway drops a message with more parts than this as malformed.
MAX_FRAMES_PER_MESSAGE = 256
DEFAULT_WORKER_BIND = "tcp://127.0.0.1:5557"
TAG_KEY = "t"
VERSION_KEY = "v"


class WireError(ValueError):
    """A frame that is not a valid message; `reason` is a short label for counters."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def encode(message: Message) -> bytes:
    body = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
    body[TAG_KEY] = message.tag
    body[VERSION_KEY] = PROTOCOL_VERSION
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return packed


def decode(frame: bytes, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Message:
    if len(frame) > max_bytes:
        raise WireError("oversized", f"{len(frame)} bytes > {max_bytes}")
    try:
        body = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for bad bytes
        raise WireError("malformed", str(exc) or type(exc).__name__) from None
    if not isinstance(body, dict):
        raise WireError("malformed", f"a message is a map, got {type(body).__name__}")
    if body.get(VERSION_KEY) != PROTOCOL_VERSION:
        raise WireError("version", f"protocol version {body.get(VERSION_KEY)!r}")
    cls = MESSAGE_TYPES.get(body.get(TAG_KEY))  # type: ignore[arg-type]
    if cls is None:
        raise WireError("unknown", f"message type {body.get(TAG_KEY)!r}")
    values: dict[str, Any] = {}
    for name, (hint, required) in _fields(cls).items():  # type: ignore[arg-type]
        if name not in body:
            if required:
                raise WireError("malformed", f"{cls.tag} lacks {name!r}")
            continue
        if not _matches(body[name], hint):
            raise WireError("malformed", f"{cls.tag}.{name} has the wrong type")
        values[name] = body[name]
    return cls(**values)


@cache
def _fields(cls: type[Message]) -> dict[str, tuple[Any, bool]]:
    hints = typing.get_type_hints(cls)
    return {
        f.name: (
            hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    }


def _matches(value: Any, hint: Any) -> bool:
    """Whether a decoded value fits a field's annotation (the subset the schemas use)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(
            _matches(k, key) and _matches(v, item) for k, v in value.items()
        )
    return False


class DropCounter:
    """Frames dropped, by reason; read by /stats and /metrics."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def decode(self, frame: bytes, max_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> Message | None:
        try:
            return decode(frame, max_bytes)
        except WireError as exc:
            self.counts[exc.reason] += 1
            return None
