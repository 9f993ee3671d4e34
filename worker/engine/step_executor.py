"""StepExecutor: runs a StepPlan's forward and samples its rows; it decides and records nothing."""

from __future__ import annotations

import torch

from worker.engine.runner import ModelRunner
from worker.engine.step_plan import EMPTY_OUTPUT, Chunk, StepOutput, StepPlan
from worker.engine.token_sampler import TokenSampler


class StepExecutor:
    def __init__(self, runner: ModelRunner, sampler: TokenSampler) -> None:
        self.runner = runner
        self.sampler = sampler

    def execute(self, plan: StepPlan) -> StepOutput:
        """The plan's forward, then one token for each of `plan.samples` (for a drafted
        decode, the token after its last; the drafter samples on from `decode_logits`)."""
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
