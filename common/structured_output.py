"""Structured-output specs (any JSON object, or a JSON schema) as llguidance grammars.

A spec crosses ZeroMQ in the sampling settings as `{"type": "json_object"}` or
`{"type": "json_schema", "schema": {...}, "strict": bool}`. The gateway checks it here before
any work (no tokenizer needed), naming the parameter in its protocol's own words; the worker
compiles the same text against its tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import llguidance

KINDS = ("json_object", "json_schema")
MAX_JSON_OBJECT_DEPTH = 4


def _json_value_schema(depth: int) -> dict[str, Any]:
    """Any JSON value nested at most `depth` arrays/objects deep."""
    scalar: dict[str, Any] = {"type": ["string", "number", "boolean", "null"]}
    if depth == 0:
        return scalar
    inner = _json_value_schema(depth - 1)
    return {
        "anyOf": [
            scalar,
            {"type": "array", "items": inner},
            {"type": "object", "additionalProperties": inner},
        ]
    }


# `json_object`: any JSON object, nested at most MAX_JSON_OBJECT_DEPTH deep. Unbounded, a small
# model can open {"name":{"name":… until its token budget runs out and never close one.
JSON_OBJECT_SCHEMA = {
    "type": "object",
    "additionalProperties": _json_value_schema(MAX_JSON_OBJECT_DEPTH - 1),
}


class StructuredOutputError(ValueError):
    """A spec that is malformed or that the grammar engine cannot compile."""


def grammar_text(spec: Mapping[str, Any]) -> str:
    """The llguidance grammar for `spec`; StructuredOutputError says what is wrong with it."""
    schema = schema_for(spec)
    strict = spec.get("strict") is not False
    # Keys keep their order: the properties' order is the order the output writes them in.
    return _compiled(json.dumps(schema), strict=strict)


def schema_for(spec: Mapping[str, Any]) -> dict[str, Any] | bool:
    """The JSON schema a structured-output spec asks the output to follow."""
    if not isinstance(spec, Mapping):
        raise StructuredOutputError(f"must be an object, got {type(spec).__name__}")
    kind = spec.get("type")
    if kind == "json_object":
        return JSON_OBJECT_SCHEMA
    if kind != "json_schema":
        raise StructuredOutputError(f"type must be one of {', '.join(KINDS)}, got {kind!r}")
    schema = spec.get("schema")
    if not isinstance(schema, (dict, bool)):
        raise StructuredOutputError("schema must be a JSON schema object")
    return schema


@lru_cache(maxsize=256)
def _compiled(schema_text: str, strict: bool) -> str:
    # Compact JSON and no free whitespace: a small model given room for whitespace can spend
    # its whole budget on newlines. Strict schemas refuse keywords the engine cannot enforce;
    # the others are enforced as far as the engine can ("lenient").
    options: Any = {"whitespace_flexible": False, "lenient": not strict}
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema_text, defaults=options)
    except (ValueError, TypeError) as exc:
        raise StructuredOutputError(str(exc)) from None
    error = llguidance.LLMatcher.validate_grammar(grammar, None)
    if error:
        raise StructuredOutputError(error)
    return grammar
