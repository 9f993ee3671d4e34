"""Drafter and DraftRounds: the guesses a decode step feeds after each sequence's last token,
and which of them its sampled tokens keep, model-free (worker.engine.speculation: why, when)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import NamedTuple

from worker.engine.scheduler_config import SchedulerCounters
from worker.engine.sequence import Events, Sequence, TokenEvent
from worker.engine.speculation import DraftState, StepCost, best_draft_rows
from worker.engine.step_plan import StepPlan
from worker.kv.base import KVCache


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
    """propose before the forward; the scheduler's plan carries the drafts, and DraftRounds
    keeps what the step's sampled tokens confirm.

    `cost` is set once the engine has measured its decode step; None: no drafts.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens  # per sequence and step; 0: none
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

    @staticmethod
    def observe_guesses(seqs: tuple[Sequence, ...], drafts: tuple[tuple[int, ...], ...]) -> None:
        """A guess not fed is checked against the token sampled instead."""
        for k, seq in enumerate(seqs):
            state = seq.speculation
            drafted = bool(drafts) and bool(drafts[k])
            if state is not None and state.guess is not None and not drafted:
                state.observe(1, int(seq.token_ids[-1] == state.guess))


class DraftRows(NamedTuple):
    """What a drafted step samples next (StepExecutor.sample_drafted): each sequence whose
    drafts were all kept so far, and its next row among the step's decode logits."""

    seqs: list[Sequence]
    rows: list[int]


class DraftRounds:
    """A drafted decode step after its forward, verified round by round.

    Round 0 appends each sequence's token after its last; round i + 1 the token sampled from
    the row after its i-th draft, for each sequence whose drafts were kept up to there: a
    sequence goes on while its sampled token is its draft's and it has not finished, and each
    kept draft's k/v, written in this forward, is then computed context. A round's sampling
    reads what the rounds before it appended (penalties, min_tokens, the grammar, tool calls
    so far), so the rounds alternate: StepExecutor samples one, Scheduler appends it here.
    """

    def __init__(self, plan: StepPlan) -> None:
        self.seqs, self.drafts = plan.decodes, plan.drafts
        self._fed_from = [seq.num_computed for seq in self.seqs]
        self._first_rows = plan.first_rows()
        self._alive = list(range(len(self.seqs)))  # indices of the sequences going on
        self._round = 0
        self._events: dict[Sequence, list[TokenEvent]] = {seq: [] for seq in self.seqs}

    @property
    def alive(self) -> list[Sequence]:
        """The sequences this round appends a token to (row i of its samples: alive[i])."""
        return [self.seqs[k] for k in self._alive]

    def next_rows(self) -> DraftRows:
        return DraftRows(self.alive, [self._first_rows[k] + self._round for k in self._alive])

    def record(self, appended: Events) -> bool:
        """This round's appended tokens and their events; whether any sequence goes on."""
        for seq, event in appended:
            self._events[seq].append(event)
        i, going = self._round, []
        for k in self._alive:
            seq, draft = self.seqs[k], self.drafts[k]
            if not seq.is_finished and i < len(draft) and seq.token_ids[-1] == draft[i]:
                seq.num_computed += 1
                going.append(k)
        self._alive, self._round = going, i + 1
        return bool(going)

    def finish(self, cache: KVCache, counters: SchedulerCounters) -> Events:
        """Once no sequence goes on: commit the pages of what each kept, count what was
        drafted and kept, update the acceptance estimates; one event per choice, so a client
        gets a step's kept drafts in one chunk."""
        for seq, draft, start in zip(self.seqs, self.drafts, self._fed_from, strict=True):
            if draft:
                kept = seq.num_computed - start
                assert seq.speculation is not None
                seq.speculation.observe(len(draft), kept)
                counters.draft_tokens += len(draft)
                counters.accepted_draft_tokens += kept
                if not seq.is_finished:
                    cache.commit(seq.seq_id, seq.token_ids, seq.num_computed)
        Drafter.observe_guesses(self.seqs, self.drafts)
        return [(seq, joined(events)) for seq, events in self._events.items()]
