"""The events of one accepted request, in no protocol's shape: what streams render and
non-streamed answers fold (gateway/response_fold.py)."""

from __future__ import annotations

from dataclasses import dataclass

from common.token_output import FinishReason, TokenLogprob, ToolCallDelta
from gateway.errors import GatewayError
from gateway.protocols.base import ChoiceResult


@dataclass(frozen=True)
class TokenDelta:
    """New output of choice `index`: text, its tokens' logprobs, new parts of tool calls,
    new reasoning (which comes before the text and calls of the same delta)."""

    index: int
    text: str
    logprobs: list[TokenLogprob]
    tool_calls: list[ToolCallDelta]
    prompt_logprobs: list[TokenLogprob] | None = None  # with a choice's first tokens, if asked
    reasoning: str = ""


@dataclass(frozen=True)
class ChoiceEnd:
    """Choice `index` finished normally (a stop, its length, or tool calls)."""

    index: int
    finish_reason: FinishReason
    stop: str | int | None
    completion_tokens: int
    embedding: bytes | None = None  # an embedded input's vector
    score: float | None = None  # a reranked document's relevance score

    def as_choice(self) -> ChoiceResult:
        """What a builder's `stream_choice_end` reads: the ending, not the text."""
        return ChoiceResult(
            index=self.index,
            finish_reason=self.finish_reason,
            stop=self.stop,
            completion_tokens=self.completion_tokens,
        )


@dataclass(frozen=True)
class Failed:
    """The request failed after its worker accepted it; always the last event.

    `stream_status` is what a stream, whose HTTP status was 200 already, is counted as in
    the metrics: 503 when its worker was lost or the gateway cut it, 500 when generation
    failed. A non-streamed answer uses `error`'s own status instead.
    """

    error: GatewayError
    stream_status: int


@dataclass(frozen=True)
class Restarted:
    """The request's worker was lost and another one took the request from its start: what
    came before is void. Only a non-streamed answer sees this (a stream is restarted only
    before its first event)."""


RequestEvent = TokenDelta | ChoiceEnd | Failed | Restarted
