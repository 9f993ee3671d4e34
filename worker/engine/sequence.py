"""One choice of one request as the scheduler tracks it: its status, its state and its events."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

import torch

from common.sampling_params import SamplingParams
from common.token_output import FinishReason, TokenLogprob, ToolCallDelta
from worker.engine.embedding import PooledRows
from worker.text.reasoning_parser import ReasoningParser
from worker.text.stop_strings import StopStringMatcher
from worker.text.tokenizer import IncrementalDetokenizer
from worker.text.tool_parser import ToolCallParser

if TYPE_CHECKING:
    import llguidance

    from worker.engine.speculation import DraftState


class RequestStatus(Enum):
    """One choice's state; `Sequence.move_to` is the only place it changes.

    Invariant: a WAITING or PREEMPTED sequence holds no pages and sits in the scheduler's
    waiting queue; a PREFILLING or DECODING one holds the pages of its computed tokens and
    of what it computes next, and sits in its running list; a FINISHED one holds nothing,
    has its finish reason set and is dropped from either at the next schedule.

        WAITING ──admit──▶ PREFILLING ──first token──▶ DECODING
           │                 ▲    │                      │
           │           admit │    └──────preempt───────┐ │ preempt
           │                 │                         ▼ ▼
           │               PREEMPTED ◀─────────────────┘
           ▼                  │
        FINISHED ◀──abort─────┘   (and from PREFILLING or DECODING: a stop, the length,
                                   an abort or an error)
    """

    WAITING = "waiting"  # arrived, never admitted
    PREFILLING = "prefilling"  # admitted: computing its prompt (or recomputing after preemption)
    DECODING = "decoding"  # admitted: feeding one sampled token a step (and drafts)
    PREEMPTED = "preempted"  # gave its pages back for an older sequence; waits to recompute
    FINISHED = "finished"  # ended; Sequence.finish_reason says why

    @property
    def is_running(self) -> bool:
        return self in _RUNNING


_RUNNING = frozenset({RequestStatus.PREFILLING, RequestStatus.DECODING})

TRANSITIONS: dict[RequestStatus, frozenset[RequestStatus]] = {
    RequestStatus.WAITING: frozenset({RequestStatus.PREFILLING, RequestStatus.FINISHED}),
    RequestStatus.PREFILLING: frozenset(
        {RequestStatus.DECODING, RequestStatus.PREEMPTED, RequestStatus.FINISHED}
    ),
    RequestStatus.DECODING: frozenset({RequestStatus.PREEMPTED, RequestStatus.FINISHED}),
    RequestStatus.PREEMPTED: frozenset({RequestStatus.PREFILLING, RequestStatus.FINISHED}),
    RequestStatus.FINISHED: frozenset(),
}


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_written_tokens: int = 0


@dataclass(frozen=True)
class TokenEvent:
    """What one choice produced in one step; the last event of a choice has finish_reason."""

    request_id: str
    index: int
    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] = ()
    finish_reason: FinishReason | None = None
    stop: str | int | None = None  # the stop string or stop token id that ended it
    usage: Usage | None = None  # on the last event
    error: str | None = None  # with FinishReason.ERROR
    tool_calls: tuple[ToolCallDelta, ...] = ()  # new parts of tool calls (then text is content)
    # With the first token, when asked for: each prompt token's logprob (the first's None).
    prompt_logprobs: tuple[TokenLogprob, ...] | None = None
    reasoning: str = ""  # new reasoning text (a reasoning model's thoughts; not in `text`)
    # An embedded input's vector (float32, CPU), on its only event.
    embedding: torch.Tensor | None = None
    # A reranked document's relevance score, on its only event.
    score: float | None = None

    def carrying(self, pooled: PooledRows) -> TokenEvent:
        """This last event of a prefill-only sequence, with what its rows made: a reranked
        document's score (its rows have a head), else an embedding's vector."""
        if pooled.head is not None:
            return dataclasses.replace(self, score=pooled.score())
        return dataclasses.replace(self, embedding=pooled.vector())


EventSink = Callable[[TokenEvent], None]


@dataclass(eq=False)
class OutputReaders:
    """What turns one choice's sampled tokens into the text it streams: detokenized, held
    back and cut at stop strings, then split into reasoning, answer and tool calls where
    the model reasons or may call tools (OutputProcessor.append_token, in that order)."""

    detokenizer: IncrementalDetokenizer
    stop_matcher: StopStringMatcher
    reasoning_parser: ReasoningParser | None = None  # when the output may hold reasoning
    tool_parser: ToolCallParser | None = None  # when the output may hold tool calls


@dataclass(eq=False)
class Sequence:
    """Invariant: tokens [0, num_computed) of `token_ids` have k/v in the cache.

    Every forward feeds the next tokens from num_computed on and advances it; when it
    reaches len(token_ids), the logits of the last token are sampled and the new token is
    appended. Prefill feeds many tokens, decode one, or one and the drafted guesses after
    it, each guess computed context only once its sampled token has kept it (DraftRounds);
    a preempted sequence starts again from num_computed = 0 with its generated tokens as
    part of what it recomputes.
    """

    seq_id: int
    request_id: str
    index: int
    token_ids: list[int]
    num_prompt_tokens: int
    params: SamplingParams
    sink: EventSink
    generator: torch.Generator | None
    output: OutputReaders
    max_total_tokens: int  # prompt + output may not exceed this (max_tokens or context)
    num_computed: int = 0
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache at first admission
    num_cache_written_tokens: int = 0  # prompt tokens it computes into the prefix cache
    status: RequestStatus = RequestStatus.WAITING  # changed by move_to only
    finish_reason: FinishReason | None = None  # set when the status becomes FINISHED
    arrival_time: float = field(default_factory=time.monotonic)
    first_token_time: float | None = None
    grammar: llguidance.LLMatcher | None = None  # when the output is constrained
    speculation: DraftState | None = None  # its drafter, from its first decode step
    # The prompt's own logprobs so far, position by position (the first's logprob None),
    # when params.prompt_logprobs asks for them.
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)
    # An embedding or a reranked document: its prompt is computed, pooled, and it ends with
    # the vector or the score, sampling none.
    embedding: PooledRows | None = None

    @property
    def reuses_prefix(self) -> bool:
        """Its admission may take cached prefix pages: not where every prompt row has to be
        computed for what it returns (its prompt's logprobs, an embedding's mean or first
        row; a last-token embedding or a reranked document computes its last row whatever
        the cache holds)."""
        if self.records_prompt_logprobs:
            return False
        return self.embedding is None or self.embedding.takes_prefix_hits

    @property
    def records_prompt_logprobs(self) -> bool:
        """Its prompt's logprobs are asked for and not all computed yet: every prompt token
        is computed (no prefix-cache hit) with its logits kept."""
        return (
            self.params.prompt_logprobs is not None
            and len(self.prompt_logprobs) < self.num_prompt_tokens
        )

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def tool_progress(self) -> ToolCallParser | None:
        """Its tool calls so far (the grammar stage ends an answer with no room for another)."""
        return self.output.tool_parser

    def move_to(self, status: RequestStatus) -> None:
        """The one place a status changes; a move RequestStatus does not allow is a bug."""
        if status not in TRANSITIONS[self.status]:
            raise AssertionError(f"sequence {self.seq_id}: {self.status.name} -> {status.name}")
        self.status = status

    def finish(self, reason: FinishReason) -> None:
        self.move_to(RequestStatus.FINISHED)
        self.finish_reason = reason

    def usage(self) -> Usage:
        return Usage(
            self.num_prompt_tokens,
            self.num_output_tokens,
            self.num_cached_tokens,
            self.num_cache_written_tokens,
        )

    def end_event(self, error: str | None = None) -> TokenEvent:
        """The last event of a sequence that ended without a token (abort, error, pooled)."""
        assert self.finish_reason is not None
        reason, usage = self.finish_reason, self.usage()
        return TokenEvent(self.request_id, self.index, "", (), (), reason, usage=usage, error=error)


# A step's events, each with the sequence whose sink it goes to, in the order they leave.
Events = list[tuple[Sequence, TokenEvent]]
