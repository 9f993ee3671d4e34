"""SamplingParams: one request's generation settings, the one struct that crosses ZeroMQ.

Built where settings enter: by the gateway from a protocol's body, by the engine API from
keywords, and by the wire codec on the worker's side of Submit and Tokenize (`to_wire`, then
`from_wire`). Each checks by the same rules, once, so no side accepts what another refuses;
past those edges every part of the worker reads this one typed struct.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError, model_validator

from common.errors import RequestError
from common.structured_output import KINDS
from common.tool_calls import CHOICES
from common.validation import (
    INT64_MAX,
    INT64_MIN,
    MAX_COUNT,
    boolean,
    check_json_object,
    check_text,
    describe,
    integer,
    invalid,
    json_type,
    number,
    show,
)

MAX_TOP_LOGPROBS = 20
MAX_LOGIT_BIAS = 100
MAX_N = 16
# Every stop string is looked for in each new piece of every choice's text: a bounded number
# of bounded strings (OpenAI's own API allows 4; Anthropic's stop_sequences had no limit here).
MAX_STOPS = 16
MAX_STOP_CHARS = 500


def _top_k(value: Any) -> int:
    """top_k >= 0; -1 (vLLM's "off") is taken as 0, which is off too."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"must be an integer, got {json_type(value)}")
    if value < -1:
        raise invalid(f"must be >= -1 (-1 and 0 mean off), got {show(value)}")
    if value > MAX_COUNT:
        raise invalid(f"must be at most {MAX_COUNT}, got {show(value)}")
    return max(value, 0)


def _strings(value: Any) -> tuple[str, ...]:
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


def _token_ids(value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise invalid(f"must be an array of token ids, got {json_type(value)}")
    for i, token in enumerate(value):
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= MAX_COUNT:
            raise invalid(f"must be a token id (an integer >= 0), got {show(token)}", str(i))
    return tuple(value)


def _logit_bias(value: Any) -> tuple[tuple[int, float], ...]:
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


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    """Function definitions {name, description, parameters, strict}, JSON all through."""
    if not isinstance(value, (list, tuple)):
        raise invalid(f"must be an array of tools, got {json_type(value)}")
    for i, tool in enumerate(value):
        check_json_object(tool, str(i))
        check_text(tool.get("name"), non_empty=True, at=f"{i}.name")
    return tuple(dict(tool) for tool in value)


def _tool_choice(value: Any) -> str | dict[str, Any]:
    if isinstance(value, str) and value in CHOICES:
        return value
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return check_json_object(value)
    raise invalid(f'must be one of {", ".join(CHOICES)} or {{"name": …}}, got {show(value)}')


def _structured_output(value: Any) -> dict[str, Any] | None:
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


def _template_kwargs(value: Any) -> dict[str, Any]:
    """Extra variables for the chat template (vLLM's chat_template_kwargs), e.g.
    {"enable_thinking": false}: a JSON object keyed by identifiers it does not reserve."""
    if not isinstance(value, dict):
        raise invalid(f"must be an object, got {json_type(value)}")
    for key in value:
        if not key.isidentifier() or key in RESERVED_TEMPLATE_KWARGS:
            raise invalid(f"may not set {show(key)}: not a template variable a request sets")
    return check_json_object(value)


def _count(low: int = 0) -> Any:
    return integer(low, None, MAX_COUNT)


class SamplingParams(BaseModel):
    """How one request picks tokens and when it stops.

    temperature 0 is greedy; top_k 0 (or -1) and top_p 1.0 switch those filters off; every
    default is "off", as OpenAI's and Anthropic's APIs have it. max_tokens None means "until
    a stop or the context is full". Building one with a bad value raises RequestError naming
    the field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: Annotated[float, number(0)] = 1.0
    top_k: Annotated[int, PlainValidator(_top_k)] = 0
    top_p: Annotated[float, number(0, 1, low_open=True)] = 1.0
    min_p: Annotated[float, number(0, 1)] = 0.0
    max_tokens: Annotated[int, _count(1)] | None = None
    # A max_tokens past what the context leaves after the prompt is cut to it (the answer
    # then ends with "length" when the context fills), as llama.cpp's server does; off, it
    # is refused (OpenAI's routes keep that 400).
    clamp_max_tokens: Annotated[bool, boolean()] = False
    min_tokens: Annotated[int, _count()] = 0
    presence_penalty: Annotated[float, number(-2, 2)] = 0.0
    frequency_penalty: Annotated[float, number(-2, 2)] = 0.0
    repetition_penalty: Annotated[float, number(0, low_open=True)] = 1.0
    seed: Annotated[int, integer(INT64_MIN, INT64_MAX)] | None = None
    stop: Annotated[tuple[str, ...], PlainValidator(_strings)] = ()
    stop_token_ids: Annotated[tuple[int, ...], PlainValidator(_token_ids)] = ()
    ignore_eos: Annotated[bool, boolean()] = False
    logprobs: Annotated[bool, boolean()] = False
    top_logprobs: Annotated[int, integer(0, MAX_TOP_LOGPROBS)] = 0
    # The prompt's own tokens' logprobs (each given the tokens before it; the first has
    # none), with this many likeliest alternatives each; None: not computed.
    prompt_logprobs: Annotated[int, integer(0, MAX_TOP_LOGPROBS)] | None = None
    n: Annotated[int, integer(1, MAX_N)] = 1
    skip_special_tokens: Annotated[bool, boolean()] = True
    # {"type": "json_object"} or {"type": "json_schema", "schema": {...}, "strict": bool}:
    # the output is constrained to it token by token (worker/sampling/grammar.py).
    structured_output: Annotated[dict[str, Any] | None, PlainValidator(_structured_output)] = None
    # Functions the model may call ({name, description, parameters, strict}), and whether it
    # must: "auto", "none", "required" or {"name": …}; its calls are constrained to them.
    tools: Annotated[tuple[dict[str, Any], ...], PlainValidator(_tools)] = ()
    tool_choice: Annotated[str | dict[str, Any], PlainValidator(_tool_choice)] = "auto"
    parallel_tool_calls: Annotated[bool, boolean()] = True
    # The chat ends with an assistant message the answer continues (the prefill idiom),
    # rather than a turn it answers.
    continue_final_message: Annotated[bool, boolean()] = False
    # A chat too long for the context loses its oldest turns until it fits (the Responses
    # API's truncation "auto"); otherwise it is refused.
    drop_oldest_turns: Annotated[bool, boolean()] = False
    # Variables for the chat template (vLLM's field), e.g. {"enable_thinking": False}.
    chat_template_kwargs: Annotated[dict[str, Any], PlainValidator(_template_kwargs)] = {}
    # (token id, bias) pairs added to the logits before sampling (OpenAI's logit_bias).
    logit_bias: Annotated[tuple[tuple[int, float], ...], PlainValidator(_logit_bias)] = ()

    def __init__(self, **data: Any) -> None:
        # None for an optional setting means its default, as for a JSON null.
        data = {key: value for key, value in data.items() if value is not None}
        unknown = sorted(set(data) - set(type(self).model_fields))
        if unknown:
            raise RequestError(f"unknown sampling parameter {unknown[0]!r}", unknown[0])
        try:
            super().__init__(**data)
        except ValidationError as exc:
            param, message = describe(exc)
            raise RequestError(message, param) from None

    @model_validator(mode="after")
    def _min_within_max(self) -> SamplingParams:
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            reason = f"must be <= max_tokens ({self.max_tokens}), got {self.min_tokens}"
            raise invalid(reason, "min_tokens")
        return self

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> SamplingParams:
        """Build from keyword arguments (the engine API); an unknown one names itself."""
        return cls(**kwargs)

    @classmethod
    def from_wire(cls, params: Mapping[str, Any]) -> SamplingParams:
        """Rebuild what `to_wire` sent (a msgpack map): checked again, as any input is."""
        return cls(**params)

    def to_wire(self) -> dict[str, Any]:
        """The settings given explicitly, as msgpack-friendly lists and maps."""
        return {
            name: _as_lists(getattr(self, name))
            for name in type(self).model_fields
            if name in self.model_fields_set
        }

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0

    @property
    def calls_tools(self) -> bool:
        """The answer may be tool calls (and is constrained to well-formed ones)."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def is_constrained(self) -> bool:
        """A grammar decides the whole answer's shape (structured output or tool calls)."""
        return self.structured_output is not None or self.calls_tools

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != 0
            or self.frequency_penalty != 0
            or self.repetition_penalty != 1
        )


def _as_lists(value: Any) -> Any:
    """Tuples (stops, token ids, bias pairs, tools) as the lists JSON and msgpack carry."""
    if isinstance(value, tuple):
        return [_as_lists(item) for item in value]
    return value
