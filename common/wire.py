"""msgpack codec for the wire messages; malformed input is a WireError, never a crash.

A message is a msgpack map of its fields plus its tag (`"t"`) and PROTOCOL_VERSION (`"v"`):
named fields, so a newer side may add optional ones. A struct inside a message (a token's
logprob, a tool-call part, worker stats) is the list of its fields in declaration order,
which is compact for what crosses once per token; its length must be exact. A checked
struct (SamplingParams, with to_wire and from_wire) is the map of the fields it was given,
rebuilt on arrival by its own rules: a request they refuse is a WireRefusal, which the
receiver answers with Rejected instead of dropping it. A text enum
(FinishReason, RejectCode) crosses as its value. Decoding checks every value against its
annotation (int, float, str, bool, bytes, None, list, tuple, dict, unions, enums and structs,
recursively; a bool is never an int) and builds the enums and structs; nothing is pickled.
"""

from __future__ import annotations

import dataclasses
import typing
from collections import Counter
from functools import cache
from typing import Any

import msgpack

from common.errors import RejectCode
from common.schemas import MESSAGE_TYPES, PROTOCOL_VERSION, Message
from common.wire_defaults import DEFAULT_MAX_FRAME_BYTES
from common.wire_readers import Mismatch, Reader, Refused, field_names, reader

# A worker batches the events of one step into one multipart message, each part a whole
# wire message; the gateway drops a message with more parts than this as malformed.
MAX_FRAMES_PER_MESSAGE = 256
TAG_KEY = "t"
VERSION_KEY = "v"


class WireError(ValueError):
    """A frame that is not a valid message; `reason` is a short label for counters."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class WireRefusal(WireError):
    """A well-formed request whose settings break the rules: not a bad frame to drop but a
    request its receiver refuses by id, with the parameter and message the rules gave."""

    def __init__(self, request_id: str, error: ValueError) -> None:
        super().__init__("refused", str(error))
        self.request_id = request_id
        self.message = str(error)
        self.param: str | None = getattr(error, "param", None)
        self.code: RejectCode = getattr(error, "code", RejectCode.INVALID_REQUEST)


def encode(message: Message) -> bytes:
    fields = field_names(type(message))  # type: ignore[arg-type]  # classes hash
    body = {name: getattr(message, name) for name in fields}
    body[TAG_KEY] = message.tag
    body[VERSION_KEY] = PROTOCOL_VERSION
    # msgpack calls `default` only for what it cannot pack itself: the structs.
    packed: bytes = msgpack.packb(body, use_bin_type=True, default=_struct_as_list)
    return packed


def _struct_as_list(value: Any) -> list[Any] | dict[str, Any]:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, name) for name in field_names(type(value))]
    if hasattr(value, "to_wire"):  # a checked struct: the map of its fields
        wire: dict[str, Any] = value.to_wire()
        return wire
    raise TypeError(f"{type(value).__name__} cannot cross the wire")


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
    for name, read, required in _message_plan(cls):  # type: ignore[arg-type]
        if name not in body:
            if required:
                raise WireError("malformed", f"{cls.tag} lacks {name!r}")
            continue
        try:
            values[name] = read(body[name])
        except Mismatch:
            raise WireError("malformed", f"{cls.tag}.{name} has the wrong type") from None
        except Refused as refused:  # request_id, every request's first field, is read
            raise WireRefusal(values.get("request_id", ""), refused.error) from None
    return cls(**values)


@cache
def _message_plan(cls: type[Message]) -> tuple[tuple[str, Reader, bool], ...]:
    """(name, reader, required) of each field of a message type, in order."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (
            f.name,
            reader(hints[f.name]),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )


class DropCounter:
    """Frames dropped, by reason; read by /stats and /metrics."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def decode(
        self, frame: bytes, max_bytes: int = DEFAULT_MAX_FRAME_BYTES, refusals: bool = False
    ) -> Message | None:
        """The message, or None for a dropped frame. With `refusals` (a receiver of requests)
        a WireRefusal is raised for the caller to answer; else it is dropped and counted too."""
        try:
            return decode(frame, max_bytes)
        except WireError as exc:
            if refusals and isinstance(exc, WireRefusal):
                raise
            self.counts[exc.reason] += 1
            return None
