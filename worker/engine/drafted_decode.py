"""DraftedDecode: the decode step's drafted tokens, chosen before the forward, verified after.

See worker.engine.speculation for why and when drafts are fed. Mixed into
InferenceScheduler, whose state (running sequences, cache, counters) and sampling it uses.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import torch

from worker.engine.scheduler_config import SchedulerConfig, SchedulerCounters
from worker.engine.sequence import Sequence, TokenEvent
from worker.engine.speculation import DraftState, StepCost, best_draft_rows
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


class DraftedDecode:
    """Which drafted tokens a decode step feeds, and which of them its samples keep."""

    cache: KVCache
    config: SchedulerConfig
    counters: SchedulerCounters
    # Set once the engine has measured its decode step; None: no drafts.
    decode_cost: StepCost | None = None

    def _sample_events(
        self, seqs: list[Sequence], logits: torch.Tensor
    ) -> list[tuple[Sequence, TokenEvent]]:
        raise NotImplementedError  # InferenceScheduler's

    def _emit(self, seq: Sequence, event: TokenEvent) -> None:
        raise NotImplementedError  # InferenceScheduler's

    def _drafts(self, seqs: list[Sequence]) -> dict[Sequence, list[int]]:
        """Each sequence's drafted tokens: of all the guesses, the most likely ones, as many
        as make the most tokens per second by the measured step cost.

        A sequence with a guess not worth a row this step keeps its first token in `guess`,
        checked against the token it samples, so its acceptance estimate stays current.
        """
        cost, limit = self.decode_cost, self.config.speculative_tokens
        if cost is None or limit == 0:
            return {}
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
        taken = chances[: best_draft_rows(cost, len(seqs), [c for c, _ in chances])]
        counts = Counter(seq for _, seq in taken)
        drafts: dict[Sequence, list[int]] = {}
        for seq, proposal in proposals.items():
            count = counts[seq]
            # Rows for the drafts only where pages are free: never preempt for a guess.
            if count and self.cache.grow(seq.seq_id, len(seq.token_ids) + count):
                drafts[seq] = proposal[:count]
            else:
                assert seq.speculation is not None
                seq.speculation.guess = proposal[0]
        return drafts

    def _verify(
        self, seqs: list[Sequence], drafts: dict[Sequence, list[int]], logits: torch.Tensor
    ) -> None:
        """Sample row after row; a sequence goes on while its sampled token is its draft's.

        Row i of a sequence holds the logits after its i-th drafted token, valid while every
        draft before it was kept; each kept draft's k/v, written in this forward, is then
        computed context.
        """
        first_row: dict[Sequence, int] = {}
        fed_from = {seq: seq.num_computed for seq in drafts}
        rows = 0
        for seq in seqs:
            first_row[seq] = rows
            rows += 1 + len(drafts.get(seq, ()))
        alive, i = seqs, 0
        step_events: dict[Sequence, list[TokenEvent]] = {seq: [] for seq in seqs}
        while alive:
            index = torch.tensor([first_row[seq] + i for seq in alive], device=logits.device)
            for seq, event in self._sample_events(alive, logits.index_select(0, index)):
                step_events[seq].append(event)
            going = []
            for seq in alive:
                draft = drafts.get(seq, [])
                if not seq.is_finished and i < len(draft) and seq.token_ids[-1] == draft[i]:
                    seq.num_computed += 1
                    going.append(seq)
            alive, i = going, i + 1
        for seq, draft in drafts.items():
            kept = seq.num_computed - fed_from[seq]
            assert seq.speculation is not None
            seq.speculation.observe(len(draft), kept)
            self.counters.draft_tokens += len(draft)
            self.counters.accepted_draft_tokens += kept
            if not seq.is_finished:
                self.cache.commit(seq.seq_id, seq.token_ids, seq.num_computed)
        # One event per choice and step: a client gets the kept drafts in one chunk.
        for seq, events in step_events.items():
            self._emit(seq, joined(events))

    @staticmethod
    def _observe_guesses(seqs: list[Sequence], drafts: dict[Sequence, list[int]]) -> None:
        for seq in seqs:
            state = seq.speculation
            if state is not None and state.guess is not None and seq not in drafts:
                state.observe(1, int(seq.token_ids[-1] == state.guess))
