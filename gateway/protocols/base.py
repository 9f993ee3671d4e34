"""The protocol-neutral request and result, and the ResponseBuilder each protocol implements."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from common.embedding import EmbedSettings
from common.rerank import RerankSettings
from common.sampling_params import SamplingParams
from common.schemas import Submit
from common.token_output import FinishReason, TokenLogprob, ToolCallDelta
from gateway.errors import GatewayError


@dataclass(frozen=True)
class ChatRequest:
    """What a client asked for, in no protocol's shape: a chat, or raw prompts.

    `params` are the request's generation settings, checked where the body entered; the
    gateway forwards them in `Submit.params`.
    With `prompts` (the Completions API) `messages` is empty and each prompt is its own
    generation of n choices, numbered prompt-major: prompt p's choice i is p * n + i.
    """

    model: str | None
    messages: list[dict[str, str]]  # [{"role": "system"|"user"|"assistant", "content": str}]
    params: SamplingParams
    stream: bool = False
    include_usage: bool = False  # OpenAI stream_options.include_usage
    metadata: dict[str, Any] = field(default_factory=dict)
    prompts: list[str | list[int]] | None = None  # raw text or token ids, no chat template
    echo: bool = False  # each choice's text starts with its prompt's text
    # Fields the protocol's answer carries as they are (Anthropic's context_management).
    response_fields: dict[str, Any] = field(default_factory=dict)
    # An embeddings request: each of `prompts` is embedded instead of continued.
    embed: EmbedSettings | None = None
    # A rerank request: each of `prompts` (a document) is scored against a query instead.
    rerank: RerankSettings | None = None

    @property
    def n(self) -> int:
        return self.params.n

    @property
    def num_choices(self) -> int:
        return self.n * (len(self.prompts) if self.prompts is not None else 1)

    def submit(self, request_id: str) -> Submit:
        """The wire message that asks a worker for this request."""
        if self.prompts is not None:
            return Submit(
                request_id,
                self.params,
                prompts=self.prompts,
                echo=self.echo,
                embed=self.embed,
                rerank=self.rerank,
            )
        return Submit(request_id, self.params, messages=self.messages)

    @property
    def routing_text(self) -> str:
        """The prompt as the cache-aware router sees it; token ids as text keep the property
        it needs (prompts with the same leading tokens share leading characters)."""
        if self.prompts is None:
            return "\n".join(m["content"] for m in self.messages)
        return "\n".join(p if isinstance(p, str) else " ".join(map(str, p)) for p in self.prompts)


@dataclass
class ToolCall:
    """One tool call of a choice; `id` as the worker made it (the protocols prefix it)."""

    id: str
    name: str
    arguments: str = ""  # JSON text


@dataclass
class ChoiceResult:
    """One finished choice, accumulated from the worker's Tokens and Finished messages."""

    index: int
    text: str = ""
    finish_reason: FinishReason | None = None
    stop: str | int | None = None  # the stop string or stop token id that ended it
    logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob] | None = None  # each prompt token's, when asked for
    completion_tokens: int = 0
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str = ""  # a reasoning model's thoughts, apart from `text`
    embedding: bytes | None = None  # an embedded input's vector (common/embedding.py)
    score: float | None = None  # a reranked document's relevance score

    def add_tool_call_parts(self, parts: list[ToolCallDelta]) -> None:
        for part in parts:
            if part.name is not None:
                self.tool_calls.append(ToolCall(part.id or "", part.name))
            elif self.tool_calls:
                self.tool_calls[-1].arguments += part.arguments


@dataclass
class ChatResult:
    """A whole request's outcome, for a non-streamed response."""

    request_id: str
    model: str
    created: int
    choices: list[ChoiceResult]
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_written_tokens: int = 0
    request: ChatRequest | None = None  # what was asked, for builders that echo it

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion_tokens for c in self.choices)


@dataclass
class StreamState:
    """What a builder needs while streaming one response; it may keep its own flags here."""

    request_id: str
    model: str
    created: int
    request: ChatRequest
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_written_tokens: int = 0
    completion_tokens: int = 0
    flags: dict[str, Any] = field(default_factory=dict)


def sse_data(payload: Any) -> str:
    """One SSE event with only a data line (OpenAI style)."""
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {text}\n\n"


def sse_event(event: str, payload: Any) -> str:
    """One named SSE event (Anthropic style)."""
    return f"event: {event}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"


class ResponseBuilder(ABC):
    """One protocol: parse its requests, shape its responses, streams and errors.

    Adding a protocol is one subclass; the ProtocolHandler drives every builder the same way:
    parse → (worker accepts) → stream_start, (stream_reasoning, stream_tokens,
    stream_tool_calls)*, stream_choice_end per choice,
    stream_end; or format_response once everything has finished.
    """

    name: str
    id_prefix: str

    @abstractmethod
    def parse(self, body: Any) -> ChatRequest:
        """Validate a decoded JSON body; raise GatewayError (400) naming the bad parameter."""

    @abstractmethod
    def format_response(self, result: ChatResult) -> dict[str, Any]: ...

    @abstractmethod
    def stream_start(self, state: StreamState) -> list[str]: ...

    @abstractmethod
    def stream_tokens(
        self, state: StreamState, index: int, text: str, logprobs: list[TokenLogprob]
    ) -> list[str]: ...

    def stream_reasoning(self, state: StreamState, index: int, text: str) -> list[str]:
        """New reasoning of choice `index`, which comes before its text and tool calls (a
        protocol without a place for it has nothing to send)."""
        return []

    @abstractmethod
    def stream_tool_calls(
        self, state: StreamState, index: int, parts: list[ToolCallDelta]
    ) -> list[str]:
        """New parts of choice `index`'s tool calls."""

    @abstractmethod
    def stream_choice_end(self, state: StreamState, choice: ChoiceResult) -> list[str]:
        """A choice finished (its finish reason, stop and token count are in `choice`)."""

    @abstractmethod
    def stream_end(self, state: StreamState) -> list[str]:
        """Every choice has finished."""

    @abstractmethod
    def stream_error(self, state: StreamState, error: GatewayError) -> list[str]:
        """A failure after the stream started: a well-formed error event, then the end."""

    @abstractmethod
    def error_body(self, error: GatewayError) -> tuple[int, dict[str, Any]]:
        """HTTP status and body for an error, in this protocol's shape."""

    def response_headers(self, request: ChatRequest) -> dict[str, str]:
        """Headers an accepted request's answer carries, streamed or not (none by default)."""
        return {}
