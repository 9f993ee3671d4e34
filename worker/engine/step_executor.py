"""StepExecutor: runs a StepPlan's forward and samples its rows; it decides and records nothing."""

from __future__ import annotations

from collections.abc import Sequence as SequenceABC

import torch

from worker.engine.drafting import DraftRows
from worker.engine.runner import ModelRunner
from worker.engine.sequence import Sequence
from worker.engine.step_plan import EMPTY_OUTPUT, Chunk, StepOutput, StepPlan
from worker.sampling.grammar import GrammarMasks
from worker.sampling.sampler import SampleOutput, sample_rows
from worker.text.tokenizer import Tokenizer


class TokenSampler:
    """min_tokens bans, grammar masks, then the sampling pipeline; `logits` row i is seqs[i].

    It reads the sequences (their settings, outputs so far, grammar matchers) and changes
    none of them: appending the token is Scheduler.update's.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.eos_token_ids = tuple(tokenizer.eos_token_ids)
        self.grammar_masks = GrammarMasks(
            lambda ids: tokenizer.decode(ids, skip_special_tokens=False), tokenizer.eos_token_ids
        )

    def sample(self, seqs: SequenceABC[Sequence], logits: torch.Tensor) -> SampleOutput:
        if not seqs:
            return SampleOutput([], [], [])
        self.forbid_early_stops(seqs, logits)
        self.grammar_masks.apply(logits, seqs)
        return sample_rows(logits, seqs)

    def forbid_early_stops(self, seqs: SequenceABC[Sequence], logits: torch.Tensor) -> None:
        """Rows below min_tokens may not sample a stop token."""
        for row, seq in enumerate(seqs):
            params = seq.params
            # A grammar decides alone when its output is complete.
            if seq.num_output_tokens < params.min_tokens and seq.grammar is None:
                eos = () if params.ignore_eos else self.eos_token_ids
                banned = set(params.stop_token_ids) | set(eos)
                if banned:
                    logits[row, sorted(banned)] = float("-inf")


class StepExecutor:
    """Every sampled token comes from here: the plan's forward, each sampling row's first
    token (execute), and for drafted decodes the later rows, round by round (sample_drafted)."""

    def __init__(self, runner: ModelRunner, sampler: TokenSampler) -> None:
        self.runner = runner
        self.sampler = sampler

    def execute(self, plan: StepPlan) -> StepOutput:
        """The plan's forward, then one token for each of `plan.samples` (for a drafted
        decode, the token after its last; sample_drafted samples on from `decode_logits`)."""
        if not plan.chunks:
            return EMPTY_OUTPUT
        logits, hidden = self.runner.forward(plan.chunks)
        prompt_logits: tuple[torch.Tensor | None, ...] = ()
        if any(c.all_logits for c in plan.prompt_chunks):
            prompt_logits, logits = split_prompt_logits(plan.prompt_chunks, logits)
        pooled = () if hidden is None else split_hidden(plan.prompt_chunks, hidden)
        if plan.has_drafts:
            index = torch.tensor(plan.first_rows(), device=logits.device)
            sampled = self.sampler.sample(plan.samples, logits.index_select(0, index))
            return StepOutput(sampled, prompt_logits, logits, pooled)
        return StepOutput(self.sampler.sample(plan.samples, logits), prompt_logits, None, pooled)

    def sample_drafted(self, rows: DraftRows, output: StepOutput) -> SampleOutput:
        """One round of a drafted decode (Scheduler.draft_rows): the token after each
        sequence's kept drafts, from the rows of the step's `decode_logits`."""
        logits = output.decode_logits
        assert logits is not None
        index = torch.tensor(rows.rows, device=logits.device)
        return self.sampler.sample(rows.seqs, logits.index_select(0, index))


def split_prompt_logits(
    chunks: tuple[Chunk, ...], logits: torch.Tensor
) -> tuple[tuple[torch.Tensor | None, ...], torch.Tensor]:
    """(each prompt chunk's rows where it kept every row's logits, else None; the rows to
    sample from: each chunk's last where it wants one, then the rows after the chunks')."""
    keep: list[int] = []
    kept: list[torch.Tensor | None] = []
    row = 0
    for chunk in chunks:
        n = chunk.num_logit_rows
        kept.append(logits[row : row + n] if chunk.all_logits else None)
        if chunk.wants_logits:
            keep.append(row + n - 1)
        row += n
    keep.extend(range(row, logits.shape[0]))
    index = torch.tensor(keep, dtype=torch.int64, device=logits.device)
    return tuple(kept), logits.index_select(0, index)


def split_hidden(
    chunks: tuple[Chunk, ...], hidden: torch.Tensor
) -> tuple[torch.Tensor | None, ...]:
    """Each prompt chunk's final-norm rows (its `hidden_rows`, in order), else None; decode
    rows keep none."""
    kept: list[torch.Tensor | None] = []
    row = 0
    for chunk in chunks:
        n = len(chunk.hidden_rows)
        kept.append(hidden[row : row + n] if n else None)
        row += n
    return tuple(kept)
