"""Batched next-token sampling: penalties and bias, greedy or pipeline picks, logprobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from common.sampling_params import SamplingParams
from worker.sampling.penalties import apply_penalties
from worker.sampling.pipeline import SamplingPipeline, take_rows
from worker.sampling.row_input import RowInput
from worker.sampling.rows import SamplingRow, SamplingRows


@dataclass(frozen=True)
class SampleOutput:
    """One step's picks; logprob fields are None for rows that did not ask."""

    token_ids: list[int]
    logprobs: list[float | None]
    top_logprobs: list[list[tuple[int, float]] | None]


_DEFAULT_PIPELINE = SamplingPipeline.default()


def sample_batch(
    logits: Tensor, rows: SamplingRows, pipeline: SamplingPipeline | None = None
) -> SampleOutput:
    """Each row's next token from its logits (B, V), with its own settings and generator."""
    if logits.ndim != 2 or logits.shape[0] != rows.num_rows:
        raise ValueError(f"logits must be ({rows.num_rows}, V), got {tuple(logits.shape)}")
    logits = logits.float()
    if rows.penalties is not None:
        logits = apply_penalties(logits, rows.penalties)
    if rows.logit_bias is not None:  # after the penalties, before temperature and filters
        logits = logits.index_put(rows.logit_bias[:2], rows.logit_bias[2], accumulate=True)
    token_ids = _pick(logits, rows, pipeline or _DEFAULT_PIPELINE)
    if not rows.any_logprobs:
        return SampleOutput(token_ids.tolist(), [None] * rows.num_rows, [None] * rows.num_rows)
    logprobs, top_logprobs = _logprobs(logits, rows, token_ids)
    return SampleOutput(token_ids.tolist(), logprobs, top_logprobs)


def sample_rows(logits: Tensor, rows: Sequence[RowInput]) -> SampleOutput:
    """sample_batch for the rows as given. When every row is plain greedy (no logprobs,
    penalties or bias) the answer is the argmax, without building SamplingRows' tensors, a
    visible share of a one-row decode step (docs/BENCHMARKS.md)."""
    if all(_plain_greedy(row.params) for row in rows):
        none: list[Any] = [None] * len(rows)
        return SampleOutput(_argmax(logits.float()).tolist(), none, list(none))
    return sample_batch(logits, SamplingRows.build(rows, logits.device))


def _plain_greedy(params: SamplingParams) -> bool:
    return (
        params.is_greedy
        and not params.logprobs
        and not params.has_penalties
        and not params.logit_bias
    )


def _pick(logits: Tensor, rows: SamplingRows, pipeline: SamplingPipeline) -> Tensor:
    """Token ids (B,): argmax for greedy rows, a pipeline draw for the others."""
    if rows.all_greedy:
        return _argmax(logits)
    drawn = pipeline.draw(logits, rows)  # (S,)
    if not rows.any_greedy:
        return drawn
    return _argmax(logits).index_copy_(0, rows.sampled_index, drawn)


def _argmax(logits: Tensor) -> Tensor:
    # max(dim).indices is the first maximum like argmax, and faster on a CPU.
    return logits.max(dim=-1).indices


def _logprobs(
    logits: Tensor, rows: SamplingRows, token_ids: Tensor
) -> tuple[list[float | None], list[list[tuple[int, float]] | None]]:
    # Logprobs describe the model after penalties but before temperature and filters, so a
    # row reports the same numbers whatever its temperature/top-k/top-p, and no kept token
    # ever reads -inf.
    logprobs = torch.log_softmax(take_rows(logits, rows.logprob_index), dim=-1)  # (L, V)
    picked = token_ids.index_select(0, rows.logprob_index).unsqueeze(1)  # (L, 1)
    chosen = logprobs.gather(1, picked).squeeze(1).tolist()
    num_top = min(rows.max_top_logprobs, logprobs.shape[-1])
    top_values: list[list[float]] = []
    top_ids: list[list[int]] = []
    if num_top > 0:
        top = logprobs.topk(num_top, dim=-1)  # sorted, descending
        top_values, top_ids = top.values.tolist(), top.indices.tolist()
    out: list[float | None] = [None] * rows.num_rows
    out_top: list[list[tuple[int, float]] | None] = [None] * rows.num_rows
    for j, row in enumerate(rows.logprob_rows):
        out[row] = chosen[j]
        wanted = rows.top_logprobs[row]
        if wanted > 0:
            out_top[row] = list(zip(top_ids[j][:wanted], top_values[j][:wanted], strict=True))
    return out, out_top


def sample(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One-shot shortcut: token ids (B,) for logits (B, V), a 0-d id for (V,); all rows share
    the settings and draw from `generator` in row order."""
    if logits.ndim not in (1, 2) or logits.shape[-1] == 0 or not logits.is_floating_point():
        raise ValueError(
            f"logits must be a float (V,) or (B, V) tensor with V >= 1, "
            f"got {logits.dtype} {tuple(logits.shape)}"
        )
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    batch = logits.reshape(-1, logits.shape[-1]).float()  # (B, V)
    row = SamplingRow(params, generator)
    token_ids = _pick(
        batch, SamplingRows.build([row] * batch.shape[0], logits.device), _DEFAULT_PIPELINE
    )
    return token_ids[0] if logits.ndim == 1 else token_ids
