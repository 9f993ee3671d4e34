"""What OpenAI's Chat Completions and Completions routes share in their answers: usage,
finish reasons, and the `data:` chunk framing of their streams (a builder base class)."""

from __future__ import annotations

from typing import Any

from gateway.errors import GatewayError, openai_error
from gateway.protocols.base import (
    ChoiceResult,
    ResponseBuilder,
    StreamState,
    sse_data,
)


def finish_reason(choice: ChoiceResult) -> str | None:
    """OpenAI's finish reasons are the worker's: stop, length, tool_calls."""
    reason = choice.finish_reason
    return None if reason is None else str(reason)


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def vllm_prompt_logprobs(choice: ChoiceResult) -> dict[str, Any]:
    """vLLM's `prompt_logprobs` field of a choice, when it asked for them: None for the first
    token, then per token id (the prompt's own and the likeliest alternatives) its logprob,
    rank and text; {} otherwise."""
    if choice.prompt_logprobs is None:
        return {}
    entries = choice.prompt_logprobs
    rendered: list[dict[str, Any] | None] = []
    for entry in entries:
        if entry.logprob is None:
            rendered.append(None)
            continue
        position = {
            str(top.token_id): {"logprob": top.logprob, "rank": rank, "decoded_token": top.text}
            for rank, top in enumerate(entry.top, start=1)
        }
        position[str(entry.token_id)] = {
            "logprob": entry.logprob,
            "rank": entry.rank,
            "decoded_token": entry.text,
        }
        rendered.append(position)
    return {"prompt_logprobs": rendered}


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
