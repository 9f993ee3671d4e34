"""Served model names: a model's own name, its aliases, and trailing-`*` patterns that map
a client's built-in names (`claude-*`) onto it. Both sides read names by these rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePath

WILDCARD = "*"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"  # the embedded default model's name in answers


def is_pattern(name: str) -> bool:
    return name.endswith(WILDCARD)


def check_served_name(name: str) -> str:
    """A name, or a pattern whose only `*` is its last character; ValueError otherwise."""
    if not name or name.isspace():
        raise ValueError(f"served_model_name must not be empty, got {name!r}")
    if WILDCARD in name[:-1]:
        raise ValueError(f"served_model_name may hold * only at its end, got {name!r}")
    return name


def split_served_names(names: Iterable[str], default: str) -> tuple[str, tuple[str, ...]]:
    """(the model's name, its aliases): the first plain name (else `default`) names the
    model in answers; every other name and pattern is an alias."""
    given = [check_served_name(name) for name in names]
    plain = [name for name in given if not is_pattern(name)]
    name = plain[0] if plain else default
    return name, tuple(alias for alias in dict.fromkeys(given) if alias != name)


def model_names(model: str | None, served: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """(name, aliases) a worker serving `model` (a path; None: the embedded default) under
    `--served-model-name` `served` answers to: the launcher knows them before it loads."""
    default = PurePath(model).stem if model is not None else DEFAULT_MODEL_NAME
    return split_served_names(served, default)


def resolve_name(served: Mapping[str, tuple[str, ...]], requested: str) -> str | None:
    """The model `requested` means among `served` (each model's names, its own first): its
    own name, else an alias, else the pattern with the longest prefix that matches."""
    if requested in served:
        return requested
    matches = [
        (not is_pattern(alias), len(alias), model)
        for model, names in served.items()
        for alias in names[1:]
        if name_matches(alias, requested)
    ]
    return max(matches)[2] if matches else None


def name_matches(served: str, requested: str) -> bool:
    """`requested` is `served`, or starts with the prefix a pattern gives."""
    if is_pattern(served):
        return requested.startswith(served[:-1])
    return requested == served
