"""Repetition, presence and frequency penalties, applied to the rows of a batch that ask."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from worker.sampling.row_input import RowInput


@dataclass(frozen=True)
class PenaltyRows:
    """Every token a penalty looks at, as flat (row, token) pairs carrying their row's penalty,
    so applying penalties costs O(tokens) instead of O(rows x vocab)."""

    seen_rows: Tensor  # (M,) int64: batch row of each prompt/output token under repetition
    seen_ids: Tensor  # (M,) int64
    seen_repetition: Tensor  # (M,) float32: that row's repetition penalty
    output_rows: Tensor  # (N,) int64: batch row of each output token under presence/frequency
    output_ids: Tensor  # (N,) int64
    output_presence: Tensor  # (N,) float32: that row's presence penalty
    output_frequency: Tensor  # (N,) float32: that row's frequency penalty

    @classmethod
    def build(cls, rows: Sequence[RowInput], device: torch.device | str) -> PenaltyRows | None:
        seen: list[tuple[int, list[Sequence[int]]]] = []
        counted: list[tuple[int, list[Sequence[int]]]] = []
        for i, row in enumerate(rows):
            if row.params.repetition_penalty != 1:
                seen.append((i, [row.prompt_token_ids, row.output_token_ids]))
            if row.params.presence_penalty != 0 or row.params.frequency_penalty != 0:
                counted.append((i, [row.output_token_ids]))
        if not seen and not counted:
            return None
        per_row = torch.tensor(
            [
                [r.params.repetition_penalty, r.params.presence_penalty, r.params.frequency_penalty]
                for r in rows
            ],
            dtype=torch.float32,
        )  # (B, 3)
        seen_rows, seen_ids = _flatten(seen)
        output_rows, output_ids = _flatten(counted)
        return cls(
            seen_rows=seen_rows.to(device),
            seen_ids=seen_ids.to(device),
            seen_repetition=per_row[seen_rows, 0].to(device),
            output_rows=output_rows.to(device),
            output_ids=output_ids.to(device),
            output_presence=per_row[output_rows, 1].to(device),
            output_frequency=per_row[output_rows, 2].to(device),
        )


def _flatten(lists: list[tuple[int, list[Sequence[int]]]]) -> tuple[Tensor, Tensor]:
    """(row, token) pairs of every token in every part, as two flat int64 CPU tensors."""
    chunks = [torch.as_tensor(tokens, dtype=torch.long) for _, parts in lists for tokens in parts]
    if not chunks:
        return torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    lengths = torch.tensor([len(chunk) for chunk in chunks])
    owners = torch.tensor([i for i, parts in lists for _ in parts])
    return torch.repeat_interleave(owners, lengths), torch.cat(chunks).cpu()


def apply_penalties(logits: Tensor, penalties: PenaltyRows) -> Tensor:
    """A copy of logits (B, V) with penalties applied; the input is never written.

    HF repetition penalty over prompt + output first (a seen token's positive logit is divided
    by r, a negative one multiplied), then OpenAI's over output tokens only:
    logit -= presence * (count > 0) + frequency * count.
    """
    out = torch.clone(logits, memory_format=torch.contiguous_format)
    flat = out.view(-1)  # (B * V,)
    vocab = logits.shape[-1]
    if penalties.seen_ids.numel() > 0:
        # A token seen twice is written twice with the same value, computed from the original.
        seen = penalties.seen_rows * vocab + penalties.seen_ids  # (M,)
        values, r = flat[seen], penalties.seen_repetition
        flat[seen] = torch.where(values > 0, values / r, values * r)
    if penalties.output_ids.numel() > 0:
        counted = penalties.output_rows * vocab + penalties.output_ids  # (N,)
        _, inverse, counts = torch.unique(counted, return_inverse=True, return_counts=True)
        count = counts[inverse].to(out.dtype)  # (N,) occurrences of each pair's token, all > 0
        penalty = penalties.output_presence + penalties.output_frequency * count
        flat[counted] = flat[counted] - penalty
    return out
