"""What OpenAI's Chat Completions and Completions routes share: sampling parameters, usage,
finish reasons, and the `data:` chunk framing of their streams (a builder base class)."""

from __future__ import annotations

from typing import Any

from gateway.errors import GatewayError, openai_error
from gateway.protocols.base import (
    FINISH_LENGTH,
    FINISH_STOP,
    ChoiceResult,
    ResponseBuilder,
    StreamState,
    sse_data,
)
from gateway.protocols.validate import (
    get_bool,
    get_int,
    get_number,
    get_object,
    show,
    string_list,
    token_ids,
    wrong_type,
)

FINISH_REASONS = {FINISH_STOP: "stop", FINISH_LENGTH: "length"}
MAX_N = 16
MAX_STOPS = 4
MAX_LOGIT_BIAS_ENTRIES = 1024
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def sampling_params(body: dict[str, Any]) -> dict[str, Any]:
    """The worker's sampling keywords both routes take; temperature, top_p, top_k and n are
    always sent (the worker's own defaults differ from OpenAI's)."""
    temperature = get_number(body, "temperature", low=0, high=2)
    top_p = get_number(body, "top_p", low=0, high=1, low_open=True)
    top_k = get_int(body, "top_k", low=-1)  # vLLM extension; -1 means off, as 0 does
    n = get_int(body, "n", low=1, high=MAX_N)
    params: dict[str, Any] = {
        "temperature": 1.0 if temperature is None else temperature,
        "top_p": 1.0 if top_p is None else top_p,
        "top_k": 0 if top_k is None else max(top_k, 0),
        "n": 1 if n is None else n,
    }
    optional = {
        "min_tokens": get_int(body, "min_tokens", low=0),
        "min_p": get_number(body, "min_p", low=0, high=1),
        "presence_penalty": get_number(body, "presence_penalty", low=-2, high=2),
        "frequency_penalty": get_number(body, "frequency_penalty", low=-2, high=2),
        "repetition_penalty": get_number(body, "repetition_penalty", low=0, low_open=True),
        "seed": get_int(body, "seed", low=INT64_MIN, high=INT64_MAX),
        "stop": _stop(body.get("stop")),
        "stop_token_ids": _stop_token_ids(body.get("stop_token_ids")),
        "ignore_eos": get_bool(body, "ignore_eos"),
        "logit_bias": _logit_bias(get_object(body, "logit_bias")),
    }
    params.update((key, value) for key, value in optional.items() if value is not None)
    return params


def check_min_tokens(params: dict[str, Any]) -> None:
    """min_tokens may not exceed max_tokens (checked once both are known)."""
    if "min_tokens" in params and "max_tokens" in params:
        min_tokens, max_tokens = params["min_tokens"], params["max_tokens"]
        if min_tokens > max_tokens:
            message = f"min_tokens must be <= max_tokens ({max_tokens}), got {min_tokens}"
            raise GatewayError.invalid(message, "min_tokens")


def include_usage(body: dict[str, Any], stream: bool) -> bool:
    """`stream_options.include_usage`; stream_options without a stream is a 400."""
    options = get_object(body, "stream_options")
    if options is None:
        return False
    if not stream:
        message = "stream_options is only allowed when stream is true"
        raise GatewayError.invalid(message, "stream_options")
    param = "stream_options.include_usage"
    return bool(get_bool(options, "include_usage", param=param))


def finish_reason(choice: ChoiceResult) -> str | None:
    reason = choice.finish_reason
    return FINISH_REASONS.get(reason, reason) if reason is not None else None


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


class OpenAIStreamBuilder(ResponseBuilder):
    """The parts of a ResponseBuilder both OpenAI routes shape alike: chunks of one `object`
    type, an optional usage chunk, `data: [DONE]`, and OpenAI's error bodies."""

    chunk_object: str  # "chat.completion.chunk" | "text_completion"

    def chunk(
        self, state: StreamState, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None
    ) -> str:
        """One chunk; with include_usage every chunk carries `usage` (null until the last)."""
        body: dict[str, Any] = {
            "id": state.request_id,
            "object": self.chunk_object,
            "created": state.created,
            "model": state.model,
            "choices": choices,
        }
        if state.request.include_usage:
            body["usage"] = usage
        return sse_data(body)

    def stream_end(self, state: StreamState) -> list[str]:
        events: list[str] = []
        if state.request.include_usage:
            totals = usage_body(state.prompt_tokens, state.completion_tokens, state.cached_tokens)
            events.append(self.chunk(state, [], totals))
        events.append(sse_data("[DONE]"))
        return events

    def stream_error(self, state: StreamState, error: GatewayError) -> list[str]:
        _, body = openai_error(error)
        return [sse_data(body), sse_data("[DONE]")]

    def error_body(self, error: GatewayError) -> tuple[int, dict[str, Any]]:
        return openai_error(error)


def _stop(value: Any) -> list[str] | None:
    """`stop`: null, one non-empty string, or an array of at most four."""
    if value is None:
        return None
    if isinstance(value, str):
        if not value:
            raise GatewayError.invalid("stop must be a non-empty string", "stop")
        return [value]
    if not isinstance(value, list):
        raise wrong_type("stop", "a string or an array of strings", value)
    return string_list(value, "stop", max_items=MAX_STOPS)


def _stop_token_ids(value: Any) -> list[int] | None:
    """`stop_token_ids` (vLLM extension): token ids that end a choice; [] is none."""
    if value is None or value == []:
        return None
    return token_ids(value, "stop_token_ids")


def _logit_bias(value: dict[str, Any] | None) -> list[list[float]] | None:
    """`logit_bias`: {"token id": bias in [-100, 100]} as [[id, bias], ...] pairs."""
    if not value:
        return None
    if len(value) > MAX_LOGIT_BIAS_ENTRIES:
        message = f"logit_bias may hold at most {MAX_LOGIT_BIAS_ENTRIES} entries, got {len(value)}"
        raise GatewayError.invalid(message, "logit_bias")
    pairs: list[list[float]] = []
    for key, bias in value.items():
        if not key.isdigit() or len(key) > 10:
            message = f"logit_bias keys must be token ids, got {show(key)}"
            raise GatewayError.invalid(message, "logit_bias")
        ok = isinstance(bias, (int, float)) and not isinstance(bias, bool)
        if not ok or not -100 <= bias <= 100:
            message = f"logit_bias[{key}] must be a number in [-100, 100], got {show(bias)}"
            raise GatewayError.invalid(message, "logit_bias")
        pairs.append([int(key), float(bias)])
    return pairs
