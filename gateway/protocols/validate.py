"""Field validators shared by the protocol parsers: a typed value, or a 400 naming the field."""

from __future__ import annotations

import json
import math
from typing import Any

from gateway.errors import GatewayError

# JSON's names for Python's decoded types; bool before int because bool is an int.
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)
_SHOW_LIMIT = 40
MAX_TOKEN_ID = 2**31 - 1  # the vocabulary is the worker's to check; this bounds the type


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def show(value: Any) -> str:
    """A short JSON rendering of a client's value, for error messages."""
    try:
        text = json.dumps(value, default=repr)
    except ValueError:  # an integer past Python's int-to-str digit limit
        text = f"a {json_type(value)}"
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."


def wrong_type(param: str, expected: str, value: Any) -> GatewayError:
    return GatewayError.invalid(f"{param} must be {expected}, got {json_type(value)}", param)


def require_object(body: Any) -> dict[str, Any]:
    """The request body itself: anything but a JSON object is a 400 with no param."""
    if not isinstance(body, dict):
        raise GatewayError.invalid("request body must be a JSON object")
    return body


def get_bool(obj: dict[str, Any], key: str, *, param: str | None = None) -> bool | None:
    """`obj[key]` as a bool; absent or null is None."""
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise wrong_type(param or key, "a boolean", value)


def get_str(obj: dict[str, Any], key: str) -> str | None:
    """`obj[key]` as a string; absent or null is None."""
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise wrong_type(key, "a string", value)


def get_object(obj: dict[str, Any], key: str) -> dict[str, Any] | None:
    """`obj[key]` as a JSON object; absent or null is None."""
    value = obj.get(key)
    if value is None or isinstance(value, dict):
        return value
    raise wrong_type(key, "an object", value)


def get_int(
    obj: dict[str, Any], key: str, *, low: int | None = None, high: int | None = None
) -> int | None:
    """`obj[key]` as an integer in [low, high]; absent or null is None; 1.0 and true are not."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(key, "an integer", value)
    _check_range(key, value, low, high, low_open=False)
    return value


def get_number(
    obj: dict[str, Any],
    key: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> float | None:
    """`obj[key]` as a finite float in [low, high] (or (low, high]); absent or null is None."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise wrong_type(key, "a number", value)
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float's range
        number = math.inf
    if not math.isfinite(number):
        raise GatewayError.invalid(f"{key} must be a finite number, got {show(value)}", key)
    _check_range(key, value, low, high, low_open=low_open)
    return number


def required_str(obj: dict[str, Any], key: str) -> str:
    """`obj[key]` as a non-empty string that must be there."""
    value = get_str(obj, key)
    if value is None:
        raise missing(key)
    if not value:
        raise GatewayError.invalid(f"{key} must not be empty", key)
    return value


def required_int(obj: dict[str, Any], key: str, *, low: int | None = None) -> int:
    """`obj[key]` as an integer >= low that must be there."""
    value = get_int(obj, key, low=low)
    if value is None:
        raise missing(key)
    return value


def missing(param: str) -> GatewayError:
    return GatewayError.invalid(f"{param} is required", param)


def string_list(value: Any, param: str, *, max_items: int | None = None) -> list[str]:
    """A JSON array of non-empty strings, at most `max_items` long."""
    if not isinstance(value, list):
        raise wrong_type(param, "an array of strings", value)
    if max_items is not None and len(value) > max_items:
        message = f"{param} may hold at most {max_items} strings, got {len(value)}"
        raise GatewayError.invalid(message, param)
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise GatewayError.invalid(f"{param}[{i}] must be a non-empty string", param)
    return list(value)


def token_ids(value: Any, param: str, where: str | None = None) -> list[int]:
    """A non-empty JSON array of token ids (integers in [0, 2**31 - 1]); `where` names it in
    messages when it sits inside `param` (`prompt[2]`)."""
    where = where or param
    if not isinstance(value, list):
        raise GatewayError.invalid(
            f"{where} must be an array of token ids, got {json_type(value)}", param
        )
    if not value:
        raise GatewayError.invalid(f"{where} must not be empty", param)
    for i, token in enumerate(value):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= MAX_TOKEN_ID:
            message = f"{where}[{i}] must be a token id (an integer >= 0), got {show(token)}"
            raise GatewayError.invalid(message, param)
    return value


def text_content(content: Any, where: str, param: str) -> str:
    """A string, or an array of `{"type": "text", "text": str}` parts joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise GatewayError.invalid(
            f"{where} must be a string or an array of text parts, got {json_type(content)}", param
        )
    texts: list[str] = []
    for i, part in enumerate(content):
        at = f"{where}[{i}]"
        if not isinstance(part, dict):
            raise GatewayError.invalid(f"{at} must be an object, got {json_type(part)}", param)
        kind = part.get("type")
        if kind != "text":
            message = f'{at}.type must be "text" (only text is supported), got {show(kind)}'
            raise GatewayError.invalid(message, param)
        text = part.get("text")
        if not isinstance(text, str):
            raise GatewayError.invalid(f"{at}.text must be a string, got {json_type(text)}", param)
        texts.append(text)
    return "\n".join(texts)


def chat_messages(value: Any, roles: dict[str, str]) -> list[dict[str, str]]:
    """`messages`: a non-empty array of {role, content}; `roles` maps each accepted role to ours."""
    if value is None:
        raise missing("messages")
    if not isinstance(value, list):
        raise wrong_type("messages", "an array", value)
    if not value:
        raise GatewayError.invalid("messages must not be empty", "messages")
    messages: list[dict[str, str]] = []
    for i, message in enumerate(value):
        at = f"messages[{i}]"
        if not isinstance(message, dict):
            raise GatewayError.invalid(
                f"{at} must be an object, got {json_type(message)}", "messages"
            )
        role = message.get("role")
        if not isinstance(role, str) or role not in roles:
            allowed = ", ".join(f'"{name}"' for name in roles)
            message_text = f"{at}.role must be one of {allowed}, got {show(role)}"
            raise GatewayError.invalid(message_text, "messages")
        content = text_content(message.get("content"), f"{at}.content", "messages")
        messages.append({"role": roles[role], "content": content})
    return messages


def _check_range(
    param: str, value: float, low: float | None, high: float | None, *, low_open: bool
) -> None:
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and value > high
    if too_low or too_high:
        rule = _range_text(low, high, low_open)
        raise GatewayError.invalid(f"{param} must be {rule}, got {show(value)}", param)


def _range_text(low: float | None, high: float | None, low_open: bool) -> str:
    if high is None:
        return f"> {low}" if low_open else f">= {low}"
    if low is None:
        return f"<= {high}"
    return f"in {'(' if low_open else '['}{low}, {high}]"
