"""SamplingParams: one request's generation settings, the one struct that crosses ZeroMQ.

Checked once where settings enter: the engine API's keywords (`from_kwargs`) and the wire
codec on the worker's side of Submit and Tokenize (`to_wire`, then `from_wire`) by these
fields' rules; a request body by its protocol's model, whose rules are these or narrower
(tests/gateway/test_sampling_edge.py), after which the gateway builds the struct from the
checked values (`of_checked`). Past those edges every part of the worker reads this one
typed struct.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, PlainValidator, ValidationError, model_validator

from common import sampling_fields as rules
from common.errors import RequestError
from common.sampling_fields import MAX_N, MAX_TOP_LOGPROBS
from common.validation import INT64_MAX, INT64_MIN, boolean, describe, integer, invalid, number


class SamplingParams(BaseModel):
    """How one request picks tokens and when it stops.

    temperature 0 is greedy; top_k 0 (or -1) and top_p 1.0 switch those filters off; every
    default is "off", as OpenAI's and Anthropic's APIs have it. max_tokens None means "until
    a stop or the context is full". Building one with a bad value raises RequestError naming
    the field.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: Annotated[float, number(0)] = 1.0
    top_k: Annotated[int, PlainValidator(rules.top_k)] = 0
    top_p: Annotated[float, number(0, 1, low_open=True)] = 1.0
    min_p: Annotated[float, number(0, 1)] = 0.0
    max_tokens: Annotated[int, rules.count(1)] | None = None
    # A max_tokens past what the context leaves after the prompt is cut to it (the answer
    # then ends with "length" when the context fills), as llama.cpp's server does; off, it
    # is refused (the gateway's --max-tokens-past-context says which for OpenAI's routes).
    clamp_max_tokens: Annotated[bool, boolean()] = False
    min_tokens: Annotated[int, rules.count()] = 0
    presence_penalty: Annotated[float, number(-2, 2)] = 0.0
    frequency_penalty: Annotated[float, number(-2, 2)] = 0.0
    repetition_penalty: Annotated[float, number(0, low_open=True)] = 1.0
    seed: Annotated[int, integer(INT64_MIN, INT64_MAX)] | None = None
    stop: Annotated[tuple[str, ...], PlainValidator(rules.stop_strings)] = ()
    stop_token_ids: Annotated[tuple[int, ...], PlainValidator(rules.token_ids)] = ()
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
    structured_output: Annotated[
        dict[str, Any] | None, PlainValidator(rules.structured_output_spec)
    ] = None
    # Functions the model may call ({name, description, parameters, strict}), and whether it
    # must: "auto", "none", "required" or {"name": …}; its calls are constrained to them.
    tools: Annotated[tuple[dict[str, Any], ...], PlainValidator(rules.tool_definitions)] = ()
    tool_choice: Annotated[str | dict[str, Any], PlainValidator(rules.tool_choice)] = "auto"
    parallel_tool_calls: Annotated[bool, boolean()] = True
    # The chat ends with an assistant message the answer continues (the prefill idiom),
    # rather than a turn it answers.
    continue_final_message: Annotated[bool, boolean()] = False
    # A chat too long for the context loses its oldest turns until it fits (the Responses
    # API's truncation "auto"); otherwise it is refused.
    drop_oldest_turns: Annotated[bool, boolean()] = False
    # Variables for the chat template (vLLM's field), e.g. {"enable_thinking": False}.
    chat_template_kwargs: Annotated[dict[str, Any], PlainValidator(rules.template_kwargs)] = {}
    # (token id, bias) pairs added to the logits before sampling (OpenAI's logit_bias).
    logit_bias: Annotated[
        tuple[tuple[int, float], ...], PlainValidator(rules.logit_bias_pairs)
    ] = ()

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**_given(data))
        except ValidationError as exc:
            param, message = describe(exc)
            raise RequestError(message, param) from None

    @model_validator(mode="after")
    def _min_within_max(self) -> SamplingParams:
        reason = self._min_tokens_past_max()
        if reason is not None:
            raise invalid(reason, "min_tokens")
        return self

    def _min_tokens_past_max(self) -> str | None:
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            return f"must be <= max_tokens ({self.max_tokens}), got {self.min_tokens}"
        return None

    @classmethod
    def of_checked(cls, **settings: Any) -> SamplingParams:
        """From values a protocol's body model checked (by these fields' rules or narrower
        ones) and typed as these fields are: not checked again, only across fields."""
        params = cls.model_construct(**_given(settings))
        reason = params._min_tokens_past_max()
        if reason is not None:
            raise RequestError(f"min_tokens {reason}", "min_tokens")
        return params

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


def _given(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings given: None for an optional one means its default, as a JSON null does;
    an unknown name is refused by name."""
    given = {key: value for key, value in settings.items() if value is not None}
    unknown = sorted(set(given) - set(SamplingParams.model_fields))
    if unknown:
        raise RequestError(f"unknown sampling parameter {unknown[0]!r}", unknown[0])
    return given


def _as_lists(value: Any) -> Any:
    """Tuples (stops, token ids, bias pairs, tools) as the lists JSON and msgpack carry."""
    if isinstance(value, tuple):
        return [_as_lists(item) for item in value]
    return value
