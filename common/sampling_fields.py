"""The checks of SamplingParams' fields beyond a plain range: each takes a decoded value and
returns it as the struct holds it, or raises a failure worded as common.validation words it."""

from __future__ import annotations

from typing import Any

from common.structured_output import KINDS
from common.tool_calls import CHOICES
from common.validation import (
    MAX_COUNT,
    check_json_object,
    check_text,
    integer,
    invalid,
    json_type,
    show,
)

MAX_TOP_LOGPROBS = 20
MAX_LOGIT_BIAS = 100
MAX_N = 16
# Every stop string is looked for in each new piece of every choice's text: a bounded number
# of bounded strings (OpenAI's own API allows 4; Anthropic's stop_sequences had no limit here).
MAX_STOPS = 16
MAX_STOP_CHARS = 500


def top_k(value: Any) -> int:
    """top_k >= 0; -1 (vLLM's "off") is taken as 0, which is off too."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"must be an integer, got {json_type(value)}")
    if value < -1:
        raise invalid(f"must be >= -1 (-1 and 0 mean off), got {show(value)}")
    if value > MAX_COUNT:
        raise invalid(f"must be at most {MAX_COUNT}, got {show(value)}")
    return max(value, 0)


def stop_strings(value: Any) -> tuple[str, ...]:
    """Stop strings: one string or a sequence of non-empty ones."""
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple)):
        raise invalid(f"must be a string or an array of strings, got {json_type(value)}")
    if len(value) > MAX_STOPS:
        raise invalid(f"may hold at most {MAX_STOPS} strings, got {len(value)}")
    return tuple(
        check_text(item, non_empty=True, at=str(i), max_chars=MAX_STOP_CHARS)
        for i, item in enumerate(value)
    )


def token_ids(value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise invalid(f"must be an array of token ids, got {json_type(value)}")
    for i, token in enumerate(value):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= MAX_COUNT:
            raise invalid(f"must be a token id (an integer >= 0), got {show(token)}", str(i))
    return tuple(value)


def logit_bias_pairs(value: Any) -> tuple[tuple[int, float], ...]:
    """(token id, bias in [-100, 100]) pairs."""
    if not isinstance(value, (list, tuple)):
        raise invalid(f"must be an array of [token id, bias] pairs, got {json_type(value)}")
    pairs = []
    for i, pair in enumerate(value):
        checked = _bias_pair(pair)
        if checked is None:
            reason = f"must be a [token id, bias in [-{MAX_LOGIT_BIAS}, {MAX_LOGIT_BIAS}]] pair"
            raise invalid(f"{reason}, got {show(pair)}", str(i))
        pairs.append(checked)
    return tuple(pairs)


def _bias_pair(pair: Any) -> tuple[int, float] | None:
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
        return None
    token, bias = pair
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= MAX_COUNT:
        return None
    if isinstance(bias, bool) or not isinstance(bias, (int, float)):
        return None
    if not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:  # also NaN
        return None
    return token, float(bias)


def tool_definitions(value: Any) -> tuple[dict[str, Any], ...]:
    """Function definitions {name, description, parameters, strict}, JSON all through."""
    if not isinstance(value, (list, tuple)):
        raise invalid(f"must be an array of tools, got {json_type(value)}")
    for i, tool in enumerate(value):
        check_json_object(tool, str(i))
        check_text(tool.get("name"), non_empty=True, at=f"{i}.name")
    return tuple(dict(tool) for tool in value)


def tool_choice(value: Any) -> str | dict[str, Any]:
    if isinstance(value, str) and value in CHOICES:
        return value
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return check_json_object(value)
    raise invalid(f'must be one of {", ".join(CHOICES)} or {{"name": …}}, got {show(value)}')


def structured_output_spec(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in KINDS:
        raise invalid(f"must be an object whose type is one of {', '.join(KINDS)}")
    return check_json_object(value)


# apply_chat_template's own arguments: set by the server, never by a request.
RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "conversation",
        "messages",
        "add_generation_prompt",
        "continue_final_message",
        "tools",
        "documents",
        "chat_template",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
        "raise_exception",  # the functions transformers gives templates
        "strftime_now",
    }
)


def template_kwargs(value: Any) -> dict[str, Any]:
    """Extra variables for the chat template (vLLM's chat_template_kwargs), e.g.
    {"enable_thinking": false}: a JSON object keyed by identifiers it does not reserve."""
    if not isinstance(value, dict):
        raise invalid(f"must be an object, got {json_type(value)}")
    for key in value:
        if not key.isidentifier() or key in RESERVED_TEMPLATE_KWARGS:
            raise invalid(f"may not set {show(key)}: not a template variable a request sets")
    return check_json_object(value)


def count(low: int = 0) -> Any:
    return integer(low, None, MAX_COUNT)
