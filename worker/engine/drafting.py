"""Drafter: the guesses a decode step feeds after each sequence's last token, and which of
them the step's samples keep (see worker.engine.speculation for why and when)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable

import torch

from worker.engine.scheduler_config import SchedulerCounters
from worker.engine.sequence import Sequence, TokenEvent
from worker.engine.speculation import DraftState, StepCost, best_draft_rows
from worker.engine.token_sampler import TokenSampler
from worker.kv.base import KVCache
from worker.sampling.sampler import SampleOutput

# Appends one sampled token to each sequence (row i to seqs[i]): Scheduler.update's.
Append = Callable[[list[Sequence], SampleOutput], list[tuple[Sequence, TokenEvent]]]


def joined(events: list[TokenEvent]) -> TokenEvent:
    """One choice's events of one step as one: text, tokens, logprobs and tool-call parts in
    order, and the last event's ending."""
    if len(events) == 1:
        return events[0]
    return dataclasses.replace(
        events[-1],
        text="".join(e.text for e in events),
        token_ids=tuple(t for e in events for t in e.token_ids),
        logprobs=tuple(lp for e in events for lp in e.logprobs),
        tool_calls=tuple(part for e in events for part in e.tool_calls),
    )


class Drafter:
    """propose before the forward, verify after it; the scheduler's plan carries the drafts.

    `cost` is set once the engine has measured its decode step; None: no drafts.
    """

    def __init__(self, max_tokens: int, sampler: TokenSampler, counters: SchedulerCounters) -> None:
        self.max_tokens = max_tokens  # per sequence and step; 0: none
        self.sampler = sampler
        self.counters = counters
        self.cost: StepCost | None = None

    def propose(self, seqs: list[Sequence], cache: KVCache) -> tuple[tuple[int, ...], ...]:
        """Each sequence's drafted tokens: of all the guesses, the most likely ones, as many
        as make the most tokens per second by the measured step cost; () for none at all.

        A sequence with a guess not worth a row this step keeps its first token in `guess`,
        checked against the token it samples, so its acceptance estimate stays current.
        """
        cost, limit = self.cost, self.max_tokens
        if cost is None or limit == 0:
            return ()
        proposals: dict[Sequence, list[int]] = {}
        chances: list[tuple[float, Sequence]] = []
        for seq in seqs:
            state = seq.speculation = seq.speculation or DraftState()
            state.guess = None
            room = min(limit, seq.max_total_tokens - len(seq.token_ids) - 1)
            proposal = state.drafter.propose(seq.token_ids, room)
            if proposal:
                proposals[seq] = proposal
                chances.extend((state.acceptance**j, seq) for j in range(1, len(proposal) + 1))
        chances.sort(key=lambda chance: chance[0], reverse=True)
        counts = Counter(
            seq for _, seq in chances[: best_draft_rows(cost, len(seqs), [c for c, _ in chances])]
        )
        drafts: list[tuple[int, ...]] = []
        for seq in seqs:
            proposal, count = proposals.get(seq, []), counts[seq]
            # Rows for the drafts only where pages are free: never preempt for a guess.
            if count and cache.grow(seq.seq_id, len(seq.token_ids) + count):
                drafts.append(tuple(proposal[:count]))
                continue
            if proposal:
                assert seq.speculation is not None
                seq.speculation.guess = proposal[0]
            drafts.append(())
        return tuple(drafts) if any(drafts) else ()

    def verify(
        self,
        seqs: tuple[Sequence, ...],
        drafts: tuple[tuple[int, ...], ...],
        first: SampleOutput,
        logits: torch.Tensor,
        append: Append,
    ) -> list[tuple[Sequence, TokenEvent]]:
        """Append row after row; a sequence goes on while its sampled token is its draft's.

        `first` holds each sequence's token after its last one; row i after that holds the
        logits after its i-th drafted token, valid while every draft before it was kept; each
        kept draft's k/v, written in this forward, is then computed context. The caller
        commits the pages of what was kept. One event per choice: a client gets the kept
        drafts in one chunk.
        """
        fed_from = [seq.num_computed for seq in seqs]
        first_row, row = [], 0
        for draft in drafts:
            first_row.append(row)
            row += 1 + len(draft)
        step_events: dict[Sequence, list[TokenEvent]] = {seq: [] for seq in seqs}
        alive, i, sampled = list(range(len(seqs))), 0, first
        while True:
            for seq, event in append([seqs[k] for k in alive], sampled):
                step_events[seq].append(event)
            going = []
            for k in alive:
                seq, draft = seqs[k], drafts[k]
                if not seq.is_finished and i < len(draft) and seq.token_ids[-1] == draft[i]:
                    seq.num_computed += 1
                    going.append(k)
            alive, i = going, i + 1
            if not alive:
                break
            index = torch.tensor([first_row[k] + i for k in alive], device=logits.device)
            sampled = self.sampler.sample([seqs[k] for k in alive], logits.index_select(0, index))
        for seq, draft, start in zip(seqs, drafts, fed_from, strict=True):
            if draft:
                kept = seq.num_computed - start
                assert seq.speculation is not None
                seq.speculation.observe(len(draft), kept)
                self.counters.draft_tokens += len(draft)
                self.counters.accepted_draft_tokens += kept
        return [(seq, joined(events)) for seq, events in step_events.items()]

    @staticmethod
    def observe_guesses(seqs: tuple[Sequence, ...], drafts: tuple[tuple[int, ...], ...]) -> None:
        """A guess not fed is checked against the token sampled instead."""
        for k, seq in enumerate(seqs):
            state = seq.speculation
            drafted = bool(drafts) and bool(drafts[k])
            if state is not None and state.guess is not None and not drafted:
                state.observe(1, int(seq.token_ids[-1] == state.guess))
