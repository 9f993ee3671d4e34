"""Readers of decoded msgpack values: each checks a value against one field annotation (the
subset the schemas use) and builds the enums and structs it spells; see common/wire.py."""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

# Reads one decoded value as an annotation says: the value (checked), or the enum or struct
# it spells; raises Mismatch if it does not fit.
Reader = Callable[[Any], Any]


class Mismatch(Exception):
    """A value that does not fit its annotation; the codec turns it into a WireError."""


class Refused(Exception):
    """A checked struct (one with `from_wire`) whose own rules refused the value it was sent;
    the codec turns it into a WireRefusal, which its receiver answers."""

    def __init__(self, error: ValueError) -> None:
        super().__init__(str(error))
        self.error = error


@cache
def field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names in declaration order: a struct's order on the wire."""
    return tuple(f.name for f in dataclasses.fields(cls))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_none(value: Any) -> bool:
    return value is None


def _is_bytes(value: Any) -> bool:
    return isinstance(value, bytes)


# Annotations whose values are taken as they are, once checked.
_SCALARS: dict[Any, Callable[[Any], bool]] = {
    int: _is_int,
    float: _is_number,
    str: _is_str,
    bool: _is_bool,
    type(None): _is_none,
    bytes: _is_bytes,  # msgpack's bin type (use_bin_type on both sides)
}


@cache
def reader(hint: Any) -> Reader:
    """The reader of one annotation (the subset the schemas use), built once per annotation."""
    if hint is Any:
        return _as_is
    if hint in _SCALARS:
        return _checked(_SCALARS[hint])
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _union_reader(args)
    if origin is list:
        return _list_reader(args[0] if args else Any)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = reader(args[0])
        return lambda value: tuple(_items(value, item))
    if origin is dict:
        key, item = (reader(arg) for arg in (args or (Any, Any)))
        return lambda value: _checked_dict(value, key, item)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_reader(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _struct_reader(hint)
    if isinstance(hint, type) and hasattr(hint, "from_wire"):
        return _checked_struct_reader(hint)
    raise TypeError(f"the wire cannot carry {hint!r}")


def _as_is(value: Any) -> Any:
    return value


def _checked(is_valid: Callable[[Any], bool]) -> Reader:
    def read(value: Any) -> Any:
        if is_valid(value):
            return value
        raise Mismatch

    return read


def _union_reader(args: tuple[Any, ...]) -> Reader:
    others = tuple(reader(arg) for arg in args if arg is not type(None))
    optional = len(others) < len(args)

    def read(value: Any) -> Any:
        if value is None and optional:
            return None
        for other in others:
            try:
                return other(value)
            except Mismatch:
                pass
        raise Mismatch

    return read


def _list_reader(item_hint: Any) -> Reader:
    is_valid = _SCALARS.get(item_hint)
    if is_valid is not None:  # the hot path (token ids): check, keep the list itself

        def read_scalars(value: Any) -> Any:
            if isinstance(value, list) and all(map(is_valid, value)):
                return value
            raise Mismatch

        return read_scalars
    item = reader(item_hint)
    return lambda value: _items(value, item)


def _items(value: Any, item: Reader) -> list[Any]:
    if not isinstance(value, list):
        raise Mismatch
    return [item(entry) for entry in value]


def _checked_dict(value: Any, key: Reader, item: Reader) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise Mismatch
    return {key(k): item(v) for k, v in value.items()}


def _enum_reader(cls: type[enum.Enum]) -> Reader:
    members = {member.value: member for member in cls}

    def read(value: Any) -> Any:
        if isinstance(value, str) and value in members:
            return members[value]
        raise Mismatch

    return read


def _checked_struct_reader(cls: type) -> Reader:
    """A struct that crosses as the map of its fields and checks itself on arrival with
    `cls.from_wire` (SamplingParams: the rules the sending side built it with)."""
    from_wire = cls.from_wire  # type: ignore[attr-defined]  # hasattr-checked above

    def read(value: Any) -> Any:
        if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
            raise Mismatch
        try:
            return from_wire(value)
        except ValueError as exc:
            raise Refused(exc) from None

    return read


def _struct_reader(cls: type) -> Reader:
    """A struct from the list of its fields, each read by its own annotation."""
    hints = typing.get_type_hints(cls)
    readers = tuple(reader(hints[f.name]) for f in dataclasses.fields(cls))
    size = len(readers)

    def read(value: Any) -> Any:
        if not isinstance(value, list) or len(value) != size:
            raise Mismatch
        return cls(*[read_field(v) for read_field, v in zip(readers, value, strict=True)])

    return read
