"""What a choice's generation sends back, typed for the wire: token logprobs, tool-call
parts and why it finished. The worker builds these and the gateway renders them as they are."""

from __future__ import annotations

from dataclasses import dataclass

from common.text_enum import TextEnum


class FinishReason(TextEnum):
    """Why a choice ended; a str, so it compares and serializes as its value."""

    STOP = "stop"  # EOS, a stop token id or a stop string
    LENGTH = "length"  # max_tokens or the context limit
    ABORT = "abort"  # the caller cancelled it
    ERROR = "error"  # the engine failed while running it
    TOOL_CALLS = "tool_calls"  # the answer is one or more tool calls


@dataclass(frozen=True)
class TopLogprob:
    """One of the likeliest tokens at a position."""

    token_id: int
    text: str
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """A token's logprob and, best first, the likeliest alternatives; `logprob` None for a
    prompt's first token (nothing before it to predict it), `rank` (1 = the likeliest) for a
    prompt's tokens, which were not sampled."""

    token_id: int
    text: str
    logprob: float | None
    top: tuple[TopLogprob, ...] = ()
    rank: int | None = None


@dataclass(frozen=True)
class ToolCallDelta:
    """Part of call `index` of a choice: its id and name first (once), then argument text."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
