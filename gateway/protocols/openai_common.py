"""What OpenAI's Chat Completions and Completions routes share in their answers: usage,
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

FINISH_REASONS = {FINISH_STOP: "stop", FINISH_LENGTH: "length"}


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
