"""Command-line flags generated from dataclass fields, and the argv that parses back to them.

A field gets a flag when its metadata comes from `option(help=...)`; everything else about
the flag follows from the field: the name (`--max-seqs` for `max_seqs`, unless `flag=`
says otherwise), the type (int, float, str, optional ones, `tuple[str, ...]` as a
repeatable flag that takes one or more values each time, the values given replacing the
default) and the default. A bool is a switch that turns the default around: `--compile`
for a field that defaults to False, `--no-console` for one that defaults to True. The
argparse destination is the field's name, so `build(cls, args)` needs no mapping.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar

_KEY = "cli"  # the metadata key this module owns
_FIELD_DEFAULT = object()  # `flag_default` not given: the flag defaults to the field's default
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class OptionSpec:
    """What `option()` records in a field's metadata."""

    help: str
    flag: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    env: str | None = None  # the flag's default comes from this variable when it is set
    # The flag's default when it is not the field's own (or the field has none).
    flag_default: object = _FIELD_DEFAULT


def option(
    help: str,
    *,
    flag: str | None = None,
    choices: Sequence[str] | None = None,
    metavar: str | None = None,
    env: str | None = None,
    flag_default: object = _FIELD_DEFAULT,
) -> Mapping[str, OptionSpec]:
    """Metadata for `dataclasses.field(metadata=...)` that gives the field a flag."""
    spec = OptionSpec(
        help, flag, tuple(choices) if choices is not None else None, metavar, env, flag_default
    )
    return {_KEY: spec}


@dataclasses.dataclass(frozen=True)
class Flag:
    """One field's flag, resolved: how argparse reads it and how `to_argv` writes it."""

    name: str  # the field, and the argparse destination
    flag: str
    kind: str  # "value", "switch" or "repeat"
    value_type: type
    default: object
    spec: OptionSpec


def flags_of(cls: type, exclude: Collection[str] = ()) -> list[Flag]:
    """The flags of a dataclass's fields that declare one, in field order."""
    hints = typing.get_type_hints(cls)
    flags = []
    for field in dataclasses.fields(cls):
        spec = field.metadata.get(_KEY)
        if spec is None or field.name in exclude:
            continue
        kind, value_type = _kind(hints[field.name], f"{cls.__name__}.{field.name}")
        default = field.default if spec.flag_default is _FIELD_DEFAULT else spec.flag_default
        if default is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{field.name} has a flag but no default")
        if spec.env is not None:
            default = os.environ.get(spec.env, default)
        flag = spec.flag or "--" + field.name.replace("_", "-")
        flags.append(Flag(field.name, flag, kind, value_type, default, spec))
    return flags


def _kind(hint: Any, where: str) -> tuple[str, type]:
    """("value" | "switch" | "repeat", the type of one value) of a field's annotation."""
    if hint is bool:
        return "switch", bool
    if hint in (int, float, str):
        return "value", hint
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = args[0] if args[1] is type(None) else args[1]
        if inner in (int, float, str):
            return "value", inner
    if origin is tuple and args == (str, ...):
        return "repeat", str
    raise TypeError(f"{where}: no flag for a field of type {hint}")


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    exclude: Collection[str] = (),
) -> None:
    """Add one flag per option field of `cls` (but those in `exclude`) to `parser`."""
    for flag in flags_of(cls, exclude):
        spec = flag.spec
        if flag.kind == "switch":
            action = "store_false" if flag.default else "store_true"
            parser.add_argument(
                flag.flag, dest=flag.name, action=action, default=flag.default, help=spec.help
            )
            continue
        parser.add_argument(
            flag.flag,
            dest=flag.name,
            type=flag.value_type,
            action=_Repeat if flag.kind == "repeat" else "store",
            nargs="+" if flag.kind == "repeat" else None,
            default=list(flag.default) if flag.kind == "repeat" else flag.default,  # type: ignore[call-overload]
            choices=spec.choices,
            metavar=spec.metavar or _default_metavar(flag),
            help=spec.help,
        )


class _Repeat(argparse.Action):
    """argparse's "extend", except that the first use replaces the default instead of
    adding to it (`--gateway B` means B alone, not the default gateway and B)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        items = [] if current is None or current is self.default else list(current)
        items.extend(values or ())
        setattr(namespace, self.dest, items)


def _default_metavar(flag: Flag) -> str | None:
    """`--threads N`-style help reads THREADS, from the flag, not the field (`num_threads`)."""
    if flag.spec.choices:
        return None  # argparse lists the choices instead
    return flag.flag.removeprefix("--").replace("-", "_").upper()


def build(
    cls: type[T], args: argparse.Namespace, exclude: Collection[str] = (), **overrides: Any
) -> T:
    """An instance of `cls` from parsed flags; `overrides` win, other fields keep defaults."""
    values: dict[str, Any] = {}
    for flag in flags_of(cls, exclude):
        value = getattr(args, flag.name)
        values[flag.name] = tuple(value) if flag.kind == "repeat" else value
    values.update(overrides)
    return cls(**values)


def to_argv(instance: object, exclude: Collection[str] = ()) -> list[str]:
    """The flags that `build` turns back into an instance with the same option fields.

    Every value is written out, defaults included, so the reader's own defaults (another
    version, an environment variable) cannot change it; None means "not given".
    """
    argv: list[str] = []
    for flag in flags_of(type(instance), exclude):
        value = getattr(instance, flag.name)
        if flag.kind == "switch":
            if value != flag.default:
                argv.append(flag.flag)
        elif flag.kind == "repeat":
            argv += [f"{flag.flag}={item}" for item in value]
        elif value is not None:
            argv.append(f"{flag.flag}={value}")  # one word: a value may begin with "-"
    return argv
