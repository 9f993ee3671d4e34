"""Wire messages between gateway and workers: typed, frozen, tagged, versioned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from common.embedding import EmbedSettings
from common.errors import RejectCode
from common.rerank import RerankSettings
from common.sampling_params import SamplingParams
from common.token_output import FinishReason, TokenLogprob, ToolCallDelta
from common.worker_stats import WorkerStats

# 2: logprobs, tool-call parts and stats are structs (lists of their fields, in order), not
# positional lists and maps; finish reasons and reject codes are checked against their enums.
# 4: Submit and Tokenize carry SamplingParams as a checked struct, rebuilt on arrival.
# 5: WorkerStats ends with `gateways` and `gateway_failures` (a worker may serve several).
# 6: Submit.embed asks for embeddings (a worker of 5 would generate text instead), Finished
# carries the vector, and WorkerStats counts `total_embeddings`.
# 7: Submit.rerank asks for relevance scores of its prompts against a query (a worker of 6
# would generate text instead), Finished carries the score, and WorkerStats counts
# `total_rerank_documents`.
PROTOCOL_VERSION = 7


@dataclass(frozen=True)
class Message:
    """Base of every wire message; `tag` names the type on the wire."""

    tag: ClassVar[str] = ""


# -- worker → gateway ------------------------------------------------------------------------


@dataclass(frozen=True)
class Register(Message):
    """A worker announces itself. A new incarnation means a restarted process."""

    tag: ClassVar[str] = "register"
    worker_id: str
    incarnation: str
    model: str
    max_context: int
    max_seqs: int
    kv_pages: int
    page_size: int
    pid: int
    host: str
    aliases: tuple[str, ...] = ()  # other names and trailing-* patterns (common/model_names)
    # Where it publishes its KV-cache events and answers replays (docs/KV_EVENTS.md); "": none.
    kv_events: str = ""
    kv_replay: str = ""
    # Which kernels it runs, as its startup log says (the CPU and plan; each weight type's).
    kernels: str = ""


@dataclass(frozen=True)
class Heartbeat(Message):
    """Load and counters, every heartbeat interval; also proves the worker is alive."""

    tag: ClassVar[str] = "heartbeat"
    worker_id: str
    incarnation: str
    waiting: int
    running: int
    kv_pages_free: int
    kv_pages_total: int
    prefix_cache_hit_tokens: int
    stats: WorkerStats | None = None  # None from a worker that reports no figures (tests')
    draining: bool = False
    kv_events_seq: int = -1  # the last KV-event batch it published (-1: none)


@dataclass(frozen=True)
class Accepted(Message):
    """The worker queued the request; sent before any token."""

    tag: ClassVar[str] = "accepted"
    request_id: str
    prompt_tokens: int


@dataclass(frozen=True)
class Rejected(Message):
    """The worker refused the request before doing any work for it."""

    tag: ClassVar[str] = "rejected"
    request_id: str
    code: RejectCode
    message: str
    param: str | None = None


@dataclass(frozen=True)
class Tokens(Message):
    """New text of one choice: its tokens, their logprobs if asked for, new parts of tool
    calls and new reasoning (the text is then the answer's only)."""

    tag: ClassVar[str] = "tokens"
    request_id: str
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None = None
    tool_calls: list[ToolCallDelta] | None = None
    # With a choice's first tokens, when asked for: each prompt token's logprob (the first
    # token has none).
    prompt_logprobs: list[TokenLogprob] | None = None
    # New reasoning of a reasoning model (its thoughts, apart from `text`, the answer).
    reasoning: str = ""


@dataclass(frozen=True)
class Finished(Message):
    """One choice ended: why, and its usage."""

    tag: ClassVar[str] = "finished"
    request_id: str
    index: int
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    stop: str | int | None = None
    error: str | None = None
    # Prompt tokens it computed into the prefix cache for later prompts (Anthropic's
    # cache_creation_input_tokens).
    cache_written_tokens: int = 0
    # An embedded prompt's vector (common/embedding.py: float32 little-endian), with its end.
    embedding: bytes | None = None
    # A reranked document's relevance score, with its end.
    score: float | None = None


# -- gateway → worker ------------------------------------------------------------------------


@dataclass(frozen=True)
class Submit(Message):
    """Generate for chat `messages` (or a raw `prompt`, or raw `prompts`) with `params`,
    built by the gateway and checked again on arrival by the same rules (common/wire.py)."""

    tag: ClassVar[str] = "submit"
    request_id: str
    params: SamplingParams
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    # The Completions API: each prompt is text or token ids (used as they are) and its own
    # generation of n choices, numbered prompt-major (prompt p's choice i is p * n + i).
    prompts: list[str | list[int]] | None = None
    # Each choice first gets a Tokens message with its prompt's text and no token ids.
    echo: bool = False
    # Embed each of `prompts` instead (one choice each, ended by a Finished with its vector).
    embed: EmbedSettings | None = None
    # Score each of `prompts` (documents, text) against a query instead (one choice each,
    # ended by a Finished with its score).
    rerank: RerankSettings | None = None


@dataclass(frozen=True)
class GatewayBeat(Message):
    """The gateway's answer to each heartbeat: it is alive, and which incarnation it is."""

    tag: ClassVar[str] = "gateway_beat"
    incarnation: str
    # Whether the heartbeat's sender is registered, in that incarnation: False after the
    # gateway dropped a worker that then came back (stopped, frozen) without registering.
    registered: bool = True


@dataclass(frozen=True)
class Abort(Message):
    """Stop a request: its client went away, a stop was hit, or the gateway shuts down."""

    tag: ClassVar[str] = "abort"
    request_id: str


@dataclass(frozen=True)
class Tokenize(Message):
    """Token ids of chat `messages` or a `prompt` as a request with `params` would see them
    (tools and all), or, given `token_ids`, their text. Nothing is generated."""

    tag: ClassVar[str] = "tokenize"
    request_id: str
    params: SamplingParams
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    token_ids: list[int] | None = None


@dataclass(frozen=True)
class Tokenized(Message):
    """The answer to Tokenize: the token ids, or the text of the ids given."""

    tag: ClassVar[str] = "tokenized"
    request_id: str
    token_ids: list[int]
    text: str | None = None
    max_context: int = 0


MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.tag: cls
    for cls in (
        Register,
        Heartbeat,
        Accepted,
        Rejected,
        Tokens,
        Finished,
        Submit,
        GatewayBeat,
        Abort,
        Tokenize,
        Tokenized,
    )
}
