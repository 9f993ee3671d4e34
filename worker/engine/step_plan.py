"""The step's plan types: what the loop took in (Delivery), the chunks a forward feeds, the
StepPlan that lists them, and the StepOutput sampling made of it."""

from __future__ import annotations

import collections.abc
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

import torch

from worker.kv.base import EMPTY_KV_PLAN, KVStepPlan
from worker.sampling.sampler import SampleOutput

if TYPE_CHECKING:  # the plan names sequences; sequence.py (through embedding.py) names chunks
    from worker.engine.sequence import Sequence


class Delivery(NamedTuple):
    """Everything handed in since the loop last looked."""

    arrived: list[list[Sequence]]  # the choices of each request, in arrival order
    aborts: set[str]  # request ids
    abort_everything: bool  # abort every request added so far


class HiddenRows(Enum):
    """Which of a chunk's rows come back as the final norm's output (an embedding pools them)."""

    NONE = "none"
    FIRST = "first"
    LAST = "last"
    ALL = "all"

    def rows(self, length: int) -> range:
        """The rows, within a chunk of `length` tokens."""
        if self is HiddenRows.ALL:
            return range(length)
        if self is HiddenRows.FIRST:
            return range(1)
        return range(length - 1, length) if self is HiddenRows.LAST else range(0)


@dataclass(frozen=True)
class Chunk:
    """Tokens [start, start + len(token_ids)) of one sequence, fed in this forward."""

    seq_id: int
    start: int
    token_ids: collections.abc.Sequence[int]
    wants_logits: bool  # the chunk ends the sequence's known tokens: sample after it
    all_logits: bool = False  # every token's logits (a prompt's own logprobs), in order
    hidden: HiddenRows = HiddenRows.NONE  # rows whose final-norm output it keeps
    # Prompt tokens, which take the prefill's arithmetic even one at a time (a prompt whose
    # other pages were cached): its logits are then the same bits whatever was cached.
    prompt: bool = False

    @property
    def hidden_rows(self) -> range:
        return self.hidden.rows(len(self.token_ids))

    @property
    def end(self) -> int:
        return self.start + len(self.token_ids)

    @property
    def num_logit_rows(self) -> int:
        """Rows of the forward's logits this chunk gets: every token's, its last's, or none."""
        if self.all_logits:
            return len(self.token_ids)
        return int(self.wants_logits)


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One forward, decided by Scheduler.schedule before anything runs.

    Either prompt chunks (with each decoding sequence's last token riding along when the
    scheduler mixes steps) or decode rows (each decoding sequence's last token, then its
    drafted guesses as rows of their own). `chunks` is the forward in row order: prompt
    chunks, then decode rows. The KV cache already holds room for every row fed: pages for
    the chunks were planned (KVCache.shared_ready / plan) and decode rows grown; `kv` lists
    the pages each sequence was given for that, and what the forward shares there: the
    pages others read as it computes them, and the rows read in place and copied at commit.
    """

    prompts: tuple[Sequence, ...] = ()  # the sequences of prompt_chunks, in order
    prompt_chunks: tuple[Chunk, ...] = ()
    decodes: tuple[Sequence, ...] = ()  # each feeds its last token (and its drafts)
    drafts: tuple[tuple[int, ...], ...] = ()  # per decode, the guesses fed after it; or ()
    chunks: tuple[Chunk, ...] = ()  # the forward: prompt chunks, then each decode's rows
    samples: tuple[Sequence, ...] = ()  # who samples a token: prompts ending here, decodes
    preempted: tuple[Sequence, ...] = ()  # requeued this step for an older sequence's pages
    aborted: tuple[Sequence, ...] = ()  # ended by an abort since the last step
    kv: KVStepPlan = EMPTY_KV_PLAN

    @property
    def is_decode_only(self) -> bool:
        return bool(self.decodes) and not self.prompt_chunks

    @property
    def has_drafts(self) -> bool:
        return any(self.drafts)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.prompt_chunks)

    @property
    def num_rows(self) -> int:
        """Rows the forward feeds: prompt tokens, decoded tokens and drafts."""
        return sum(len(c.token_ids) for c in self.chunks)

    def first_rows(self) -> list[int]:
        """Each decode's first row among the decode rows (its drafts follow it)."""
        rows, row = [], 0
        for draft in self.drafts:
            rows.append(row)
            row += 1 + len(draft)
        return rows


def decode_chunks(seq: Sequence, draft: tuple[int, ...]) -> list[Chunk]:
    """A decoding sequence's rows: its last sampled token, then each drafted guess."""
    return [
        Chunk(seq.seq_id, seq.num_computed + i, [token], True)
        for i, token in enumerate([seq.token_ids[-1], *draft])
    ]


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What StepExecutor.execute made of a plan; Scheduler.update turns it into events.

    `sampled` has one token per `plan.samples` (for drafted decodes: the one after its last
    token). `prompt_logits` has each prompt chunk's rows where it asked for every row's logits
    (a prompt's own logprobs), else None. `decode_logits` keeps every decode row's logits when
    drafts were fed: StepExecutor.sample_drafted samples from them the rows drafts earn. `hidden`
    has each prompt chunk's final-norm rows where it kept any (an embedding's), else None.
    """

    sampled: SampleOutput
    prompt_logits: tuple[torch.Tensor | None, ...] = ()
    decode_logits: torch.Tensor | None = None
    hidden: tuple[torch.Tensor | None, ...] = ()

    @staticmethod
    def of_tokens(token_ids: list[int]) -> StepOutput:
        """Sampled ids alone (no logprobs): what a scheduler test feeds."""
        n = len(token_ids)
        return StepOutput(SampleOutput(token_ids, [None] * n, [None] * n))


EMPTY_OUTPUT = StepOutput.of_tokens([])
