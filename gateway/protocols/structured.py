"""Each protocol's structured-output parameter, checked and turned into the worker's spec."""

from __future__ import annotations

from typing import Any

from common.structured_output import StructuredOutputError, grammar_text
from common.validation import json_type, show
from gateway.errors import GatewayError


def openai_response_format(value: Any, param: str = "response_format") -> dict[str, Any] | None:
    """`response_format`: text (unconstrained), json_object, or json_schema {name, schema,
    strict}. A schema the grammar engine cannot compile is a 400 here, before any work.
    `param`: the parameter named in errors (the Responses API's `text.format` is the same)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise GatewayError.invalid(f"{param} must be an object, got {json_type(value)}", param)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return _checked({"type": "json_object"}, param)
    if kind != "json_schema":
        message = f'{param}.type must be "text", "json_object" or "json_schema", got {show(kind)}'
        raise GatewayError.invalid(message, param)
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise GatewayError.invalid(f"{param}.json_schema must be an object", param)
    if not isinstance(spec.get("name"), str) or not spec["name"]:
        raise GatewayError.invalid(f"{param}.json_schema.name must be a non-empty string", param)
    schema = spec.get("schema", {})  # OpenAI: no schema means any JSON value
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        where = f"{param}.json_schema.strict"
        raise GatewayError.invalid(f"{where} must be a boolean, got {json_type(strict)}", where)
    return _checked({"type": "json_schema", "schema": schema, "strict": bool(strict)}, param)


def anthropic_output_format(fmt: dict[str, Any] | None) -> dict[str, Any] | None:
    """`output_config.format`: {"type": "json_schema", "schema": {...}} (what the SDK's
    `messages.parse` sends); the output always follows the schema exactly."""
    if fmt is None:
        return None
    param = "output_config.format"
    if fmt.get("type") != "json_schema":
        raise GatewayError.invalid(f'{param} must be {{"type": "json_schema", "schema": …}}', param)
    if not isinstance(fmt.get("schema"), dict):
        raise GatewayError.invalid(f"{param}.schema must be a JSON schema object", param)
    return _checked({"type": "json_schema", "schema": fmt["schema"], "strict": True}, param)


def _checked(spec: dict[str, Any], param: str) -> dict[str, Any]:
    try:
        grammar_text(spec)
    except StructuredOutputError as exc:
        raise GatewayError.invalid(f"{param}: the schema cannot be used: {exc}", param) from None
    return spec
