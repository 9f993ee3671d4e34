"""OpenAI /v1/chat/completions: parse requests, shape bodies, stream chunks and errors."""

from __future__ import annotations

from typing import Any

from gateway.errors import GatewayError, openai_error
from gateway.protocols.base import (
    FINISH_LENGTH,
    FINISH_STOP,
    ChatRequest,
    ChatResult,
    ChoiceResult,
    ResponseBuilder,
    StreamState,
    TokenLogprob,
    ToolCallPart,
    sse_data,
)
from gateway.protocols.structured import openai_response_format
from gateway.protocols.tools import openai_messages, openai_tools
from gateway.protocols.validate import (
    get_bool,
    get_int,
    get_number,
    get_object,
    get_str,
    require_object,
    show,
    string_list,
    wrong_type,
)

FINISH_REASONS = {FINISH_STOP: "stop", FINISH_LENGTH: "length"}
MAX_N = 16
MAX_STOPS = 4
MAX_TOP_LOGPROBS = 20
MAX_LOGIT_BIAS_ENTRIES = 1024
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class OpenAIResponseBuilder(ResponseBuilder):
    """Chat Completions, streamed as `data:` chunks ending in `data: [DONE]`."""

    name = "openai"
    id_prefix = "chatcmpl-"

    def parse(self, body: Any) -> ChatRequest:
        body = require_object(body)
        stream = bool(get_bool(body, "stream"))
        return ChatRequest(
            model=get_str(body, "model"),
            messages=openai_messages(body.get("messages")),
            params=_params(body),
            stream=stream,
            include_usage=_include_usage(body, stream),
        )

    def format_response(self, result: ChatResult) -> dict[str, Any]:
        choices = sorted(result.choices, key=lambda choice: choice.index)
        return {
            "id": result.request_id,
            "object": "chat.completion",
            "created": result.created,
            "model": result.model,
            "choices": [
                {
                    "index": choice.index,
                    "message": _message(choice),
                    "logprobs": _logprobs(choice.logprobs),
                    "finish_reason": _finish_reason(choice),
                }
                for choice in choices
            ],
            "usage": _usage(result.prompt_tokens, result.completion_tokens, result.cached_tokens),
        }

    def stream_start(self, state: StreamState) -> list[str]:
        return [
            _chunk(state, [_delta(index, {"role": "assistant", "content": ""})])
            for index in range(state.request.n)
        ]

    def stream_tokens(
        self, state: StreamState, index: int, text: str, logprobs: list[TokenLogprob]
    ) -> list[str]:
        if not text and not logprobs:
            return []
        return [_chunk(state, [_delta(index, {"content": text}, _logprobs(logprobs))])]

    def stream_tool_calls(
        self, state: StreamState, index: int, parts: list[ToolCallPart]
    ) -> list[str]:
        chunks = []
        for part in parts:
            call: dict[str, Any] = {"index": part.index}
            if part.name is not None:
                call.update(id=f"call_{part.id}", type="function")
                call["function"] = {"name": part.name, "arguments": part.arguments}
            else:
                call["function"] = {"arguments": part.arguments}
            chunks.append(_chunk(state, [_delta(index, {"tool_calls": [call]})]))
        return chunks

    def stream_choice_end(self, state: StreamState, choice: ChoiceResult) -> list[str]:
        return [_chunk(state, [_delta(choice.index, {}, None, _finish_reason(choice))])]

    def stream_end(self, state: StreamState) -> list[str]:
        events: list[str] = []
        if state.request.include_usage:
            usage = _usage(state.prompt_tokens, state.completion_tokens, state.cached_tokens)
            events.append(_chunk(state, [], usage))
        events.append(sse_data("[DONE]"))
        return events

    def stream_error(self, state: StreamState, error: GatewayError) -> list[str]:
        _, body = openai_error(error)
        return [sse_data(body), sse_data("[DONE]")]

    def error_body(self, error: GatewayError) -> tuple[int, dict[str, Any]]:
        return openai_error(error)


def _params(body: dict[str, Any]) -> dict[str, Any]:
    """The worker's sampling keywords; temperature, top_p, top_k and n are always sent."""
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
    # max_completion_tokens replaced max_tokens; both are checked, the newer one wins.
    legacy_max_tokens = get_int(body, "max_tokens", low=1)
    max_tokens = get_int(body, "max_completion_tokens", low=1)
    optional = {
        "max_tokens": legacy_max_tokens if max_tokens is None else max_tokens,
        "min_tokens": get_int(body, "min_tokens", low=0),
        "min_p": get_number(body, "min_p", low=0, high=1),
        "presence_penalty": get_number(body, "presence_penalty", low=-2, high=2),
        "frequency_penalty": get_number(body, "frequency_penalty", low=-2, high=2),
        "repetition_penalty": get_number(body, "repetition_penalty", low=0, low_open=True),
        "seed": get_int(body, "seed", low=INT64_MIN, high=INT64_MAX),
        "stop": _stop(body.get("stop")),
        "ignore_eos": get_bool(body, "ignore_eos"),
        "logprobs": get_bool(body, "logprobs"),
        "top_logprobs": get_int(body, "top_logprobs", low=0, high=MAX_TOP_LOGPROBS),
        "structured_output": openai_response_format(body.get("response_format")),
        "logit_bias": _logit_bias(get_object(body, "logit_bias")),
    }
    params.update((key, value) for key, value in optional.items() if value is not None)
    params.update(openai_tools(body))
    _check_consistent(params)
    return params


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


def _check_consistent(params: dict[str, Any]) -> None:
    if "top_logprobs" in params and not params.get("logprobs"):
        raise GatewayError.invalid("top_logprobs requires logprobs to be true", "top_logprobs")
    if "min_tokens" in params and "max_tokens" in params:
        min_tokens, max_tokens = params["min_tokens"], params["max_tokens"]
        if min_tokens > max_tokens:
            message = f"min_tokens must be <= max_tokens ({max_tokens}), got {min_tokens}"
            raise GatewayError.invalid(message, "min_tokens")


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


def _include_usage(body: dict[str, Any], stream: bool) -> bool:
    options = get_object(body, "stream_options")
    if options is None:
        return False
    if not stream:
        message = "stream_options is only allowed when stream is true"
        raise GatewayError.invalid(message, "stream_options")
    param = "stream_options.include_usage"
    return bool(get_bool(options, "include_usage", param=param))


def _message(choice: ChoiceResult) -> dict[str, Any]:
    if not choice.tool_calls:
        return {"role": "assistant", "content": choice.text}
    return {
        "role": "assistant",
        "content": choice.text or None,
        "tool_calls": [
            {
                "id": f"call_{call.id}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in choice.tool_calls
        ],
    }


def _finish_reason(choice: ChoiceResult) -> str | None:
    reason = choice.finish_reason
    return FINISH_REASONS.get(reason, reason) if reason is not None else None


def _usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def _logprobs(logprobs: list[TokenLogprob]) -> dict[str, Any] | None:
    if not logprobs:
        return None
    return {
        "content": [
            {
                **_token_logprob(entry.token, entry.logprob),
                "top_logprobs": [_token_logprob(token, lp) for token, lp in entry.top],
            }
            for entry in logprobs
        ]
    }


def _token_logprob(token: str, logprob: float) -> dict[str, Any]:
    # errors="replace": a token that is half a code point must not fail the response.
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8", "replace"))}


def _delta(
    index: int,
    delta: dict[str, Any],
    logprobs: dict[str, Any] | None = None,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


def _chunk(
    state: StreamState, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None
) -> str:
    """One `chat.completion.chunk`; with include_usage every chunk carries `usage`."""
    chunk: dict[str, Any] = {
        "id": state.request_id,
        "object": "chat.completion.chunk",
        "created": state.created,
        "model": state.model,
        "choices": choices,
    }
    if state.request.include_usage:
        chunk["usage"] = usage
    return sse_data(chunk)
