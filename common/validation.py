"""Field types both sides validate with, and the one wording of a failed validation.

Every scalar is checked by a plain function (no coercion: `"8"`, `1.0` and `true` are not
integers), bounded to what msgpack and the engine carry (int64, int32 counts, finite floats,
text that encodes as UTF-8), and words its failure as "<path> must be …, got …"; `describe`
turns a pydantic ValidationError into that sentence and the dotted path of the parameter
(`messages.2.content`), which the gateway renders in each protocol's error shape.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import PlainValidator, ValidationError
from pydantic_core import PydanticCustomError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_COUNT = 2**31 - 1  # token counts, ids and top_k: int32 in the engine's tensors
_SHOW_LIMIT = 40
# JSON's names for Python's decoded types; bool before int because bool is an int.
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (tuple, "array"),
    (dict, "object"),
)
_OBJECT_ERRORS = ("dict_type", "model_type", "model_attributes_type", "dataclass_type")


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


def invalid(reason: str, at: str = "") -> PydanticCustomError:
    """A failure worded "<path> <reason>"; `at` extends the path below the validated value.
    The reason travels in ctx: braces in it (JSON examples) are not format fields."""
    return PydanticCustomError("astrai", "{reason}", {"reason": reason, "at": at})


def describe(exc: ValidationError) -> tuple[str | None, str]:
    """(dotted path of the first bad parameter or None for the body itself, message)."""
    error = exc.errors(include_url=False)[0]
    ctx = error.get("ctx") or {}
    loc = [str(part) for part in error["loc"]]
    if ctx.get("at"):
        loc += ctx["at"].split(".")
    path = ".".join(loc)
    kind, value = error["type"], error.get("input")
    if not path:
        if kind in _OBJECT_ERRORS:
            return None, "request body must be a JSON object"
        return None, f"request body: {ctx.get('reason', error['msg'])}"
    if kind == "astrai":
        reason = ctx["reason"]
    elif kind == "missing":
        reason = "is required"
    elif kind == "list_type":
        reason = f"must be an array, got {json_type(value)}"
    elif kind in _OBJECT_ERRORS:
        reason = f"must be an object, got {json_type(value)}"
    elif kind == "too_short":
        reason = "must not be empty"
    elif kind == "too_long":
        reason = f"may hold at most {ctx['max_length']} items, got {ctx['actual_length']}"
    elif kind == "literal_error":
        reason = f"must be {ctx['expected']}, got {show(value)}"
    elif kind == "extra_forbidden":
        reason = "is not a known parameter"
    else:
        reason = f"is invalid: {error['msg']}"
    return path, f"{path} {reason}"


# -- scalar types: use as Annotated[int, integer(1)] -----------------------------------------


def integer(low: int = INT64_MIN, high: int | None = None, bound: int = INT64_MAX) -> Any:
    """An integer in [low, high]; without `high`, at most `bound` (what the engine carries)."""

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(f"must be an integer, got {json_type(value)}")
        if high is not None and not low <= value <= high:
            raise invalid(f"must be in [{low}, {high}], got {show(value)}")
        if value < low:
            raise invalid(f"must be >= {low}, got {show(value)}")
        if value > bound:
            raise invalid(f"must be at most {bound}, got {show(value)}")
        return value

    return PlainValidator(check)


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False) -> Any:
    """A finite number in [low, high] (or (low, high]), as a float; NaN and ±Infinity never."""

    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise invalid(f"must be a number, got {json_type(value)}")
        try:
            result = float(value)
        except OverflowError:  # an integer beyond float's range
            result = math.inf
        if not math.isfinite(result):
            raise invalid(f"must be a finite number, got {show(value)}")
        too_low = low is not None and (result <= low if low_open else result < low)
        if too_low or (high is not None and result > high):
            raise invalid(f"must be {_range_text(low, high, low_open)}, got {show(value)}")
        return result

    return PlainValidator(check)


def _range_text(low: float | None, high: float | None, low_open: bool) -> str:
    if high is None:
        return f"> {low}" if low_open else f">= {low}"
    if low is None:
        return f"<= {high}"
    return f"in {'(' if low_open else '['}{low}, {high}]"


def check_text(
    value: Any, *, non_empty: bool = False, at: str = "", max_chars: int | None = None
) -> str:
    """A string that encodes as UTF-8 (JSON's "\\ud800" escape decodes to one that does not)."""
    if not isinstance(value, str):
        raise invalid(f"must be a string, got {json_type(value)}", at)
    if non_empty and not value:
        raise invalid("must not be empty", at)
    if max_chars is not None and len(value) > max_chars:
        raise invalid(f"must be at most {max_chars} characters long, got {len(value)}", at)
    _check_utf8(value, at)
    return value


def text(*, non_empty: bool = False) -> Any:
    return PlainValidator(lambda value: check_text(value, non_empty=non_empty))


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise invalid(f"must be a boolean, got {json_type(value)}")
    return value


def boolean() -> Any:
    return PlainValidator(_boolean)


def check_json_object(value: Any, at: str = "") -> dict[str, Any]:
    """A JSON object every part of which crosses msgpack: UTF-8 text, int64 integers,
    finite numbers. Walked with a stack: a deeply nested schema must not overflow ours."""
    if not isinstance(value, dict):
        raise invalid(f"must be an object, got {json_type(value)}", at)
    stack: list[tuple[str, Any]] = [(at, value)]
    while stack:
        at, item = stack.pop()
        if isinstance(item, str):
            _check_utf8(item, at)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
            raise invalid(f"must be a 64-bit integer, got {show(item)}", at)
        elif isinstance(item, float) and not math.isfinite(item):
            raise invalid(f"must be a finite number, got {show(item)}", at)
        elif isinstance(item, (list, tuple)):
            stack.extend((_join(at, str(i)), v) for i, v in enumerate(item))
        elif isinstance(item, dict):
            for key, v in item.items():
                if not isinstance(key, str):
                    raise invalid(f"keys must be strings, got {json_type(key)}", at)
                _check_utf8(key, at)
                stack.append((_join(at, key), v))
        elif not isinstance(item, (int, float)):
            raise invalid(f"must be JSON, got {type(item).__name__}", at)
    return value


def json_object() -> Any:
    return PlainValidator(lambda value: check_json_object(value))


def _join(at: str, key: str) -> str:
    return f"{at}.{key}" if at else key


def _check_utf8(value: str, at: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start : exc.start + 1].encode("unicode_escape").decode("ascii")
        raise invalid(
            f"must be valid Unicode text: it holds a lone surrogate ({bad}), "
            "which cannot be encoded as UTF-8",
            at,
        ) from None
