"""OpenAI's legacy /v1/completions: raw prompts (text or token ids) in, `text_completion` out."""

from __future__ import annotations

from typing import Any

from gateway.errors import GatewayError
from gateway.protocols.base import (
    ChatRequest,
    ChatResult,
    ChoiceResult,
    StreamState,
    TokenLogprob,
    ToolCallPart,
)
from gateway.protocols.openai_common import (
    OpenAIStreamBuilder,
    check_min_tokens,
    finish_reason,
    include_usage,
    sampling_params,
    usage_body,
)
from gateway.protocols.validate import (
    get_bool,
    get_int,
    get_str,
    json_type,
    missing,
    require_object,
    token_ids,
)

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this API (the chat API has none)
MAX_LOGPROBS = 5  # OpenAI's limit for the integer `logprobs`
MAX_CHOICES = 1024  # prompts × n in one request


class CompletionsResponseBuilder(OpenAIStreamBuilder):
    """Completions: each prompt is its own generation of n choices, numbered prompt-major
    (prompt p's choice i is p * n + i); streamed as `data:` chunks of text deltas."""

    name = "completions"
    id_prefix = "cmpl-"
    chunk_object = "text_completion"

    def parse(self, body: Any) -> ChatRequest:
        body = require_object(body)
        if body.get("suffix") is not None:  # OpenAI's insert mode: refused, never ignored
            raise GatewayError.invalid("suffix is not supported", "suffix")
        prompts = _prompts(body.get("prompt"))
        stream = bool(get_bool(body, "stream"))
        params = sampling_params(body)
        max_tokens = get_int(body, "max_tokens", low=1)
        params["max_tokens"] = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        logprobs = get_int(body, "logprobs", low=0, high=MAX_LOGPROBS)
        echo = bool(get_bool(body, "echo"))
        if logprobs is not None:
            if echo:  # the prompt's own logprobs: the worker computes logits of new tokens only
                message = "echo with logprobs is not supported (it needs the prompt's logprobs)"
                raise GatewayError.invalid(message, "echo")
            params.update(logprobs=True, top_logprobs=logprobs)
        best_of = get_int(body, "best_of", low=1)
        if best_of is not None and best_of != params["n"]:
            message = f"best_of must equal n ({params['n']}) if given, got {best_of}"
            raise GatewayError.invalid(message, "best_of")
        check_min_tokens(params)
        if len(prompts) * params["n"] > MAX_CHOICES:
            message = f"prompts × n may be at most {MAX_CHOICES}, got {len(prompts) * params['n']}"
            raise GatewayError.invalid(message, "prompt")
        return ChatRequest(
            model=get_str(body, "model"),
            messages=[],
            params=params,
            stream=stream,
            include_usage=include_usage(body, stream),
            prompts=prompts,
            echo=echo,
        )

    def format_response(self, result: ChatResult) -> dict[str, Any]:
        return {
            "id": result.request_id,
            "object": "text_completion",
            "created": result.created,
            "model": result.model,
            "choices": [
                _choice(c.index, c.text, _logprobs(c.logprobs), finish_reason(c))
                for c in sorted(result.choices, key=lambda choice: choice.index)
            ],
            "usage": usage_body(
                result.prompt_tokens, result.completion_tokens, result.cached_tokens
            ),
        }

    def stream_start(self, state: StreamState) -> list[str]:
        return []  # no role chunk in this API: the first chunk holds text

    def stream_tokens(
        self, state: StreamState, index: int, text: str, logprobs: list[TokenLogprob]
    ) -> list[str]:
        if not text and not logprobs:
            return []
        # text_offset counts on from where this choice's previous chunk ended.
        offsets: dict[int, int] = state.flags.setdefault("text_offsets", {})
        start = offsets.get(index, 0)
        offsets[index] = start + sum(len(entry.token) for entry in logprobs)
        return [self.chunk(state, [_choice(index, text, _logprobs(logprobs, start))])]

    def stream_tool_calls(
        self, state: StreamState, index: int, parts: list[ToolCallPart]
    ) -> list[str]:
        return []  # this API takes no tools, so its choices make no calls

    def stream_choice_end(self, state: StreamState, choice: ChoiceResult) -> list[str]:
        return [self.chunk(state, [_choice(choice.index, "", None, finish_reason(choice))])]


def _prompts(value: Any) -> list[str | list[int]]:
    """`prompt`: a string, an array of strings, an array of token ids, or an array of arrays
    of token ids; each string or id array is one prompt."""
    if value is None:
        raise missing("prompt")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        expected = "a string, an array of strings or an array of token ids"
        raise GatewayError.invalid(f"prompt must be {expected}, got {json_type(value)}", "prompt")
    if not value:
        raise GatewayError.invalid("prompt must not be empty", "prompt")
    if not any(isinstance(item, (str, list)) for item in value):
        return [token_ids(value, "prompt")]  # one prompt as token ids
    prompts: list[str | list[int]] = []
    for i, item in enumerate(value):
        if isinstance(item, list):
            prompts.append(token_ids(item, "prompt", f"prompt[{i}]"))
        elif not isinstance(item, str):
            expected = "a string or an array of token ids"
            message = f"prompt[{i}] must be {expected}, got {json_type(item)}"
            raise GatewayError.invalid(message, "prompt")
        elif not item:
            raise GatewayError.invalid(f"prompt[{i}] must not be empty", "prompt")
        else:
            prompts.append(item)
    return prompts


def _logprobs(entries: list[TokenLogprob], text_offset: int = 0) -> dict[str, Any] | None:
    """OpenAI's legacy logprobs object; `text_offset` is each token's start in the text."""
    if not entries:
        return None
    offsets = []
    for entry in entries:
        offsets.append(text_offset)
        text_offset += len(entry.token)
    return {
        "tokens": [entry.token for entry in entries],
        "token_logprobs": [entry.logprob for entry in entries],
        "top_logprobs": [dict(entry.top) for entry in entries],
        "text_offset": offsets,
    }


def _choice(
    index: int, text: str, logprobs: dict[str, Any] | None, finish: str | None = None
) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}
