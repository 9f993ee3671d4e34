"""SamplingRows: one batch's per-row sampling settings as tensors, built once per step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from common.sampling_params import SamplingParams
from worker.sampling.penalties import PenaltyRows
from worker.sampling.row_input import RowInput

# Top-p looks for its cut-off among this many best tokens first and sorts a whole row only when
# that row's nucleus is wider; the cut-off is the same either way (see TopPStrategy).
TOP_P_CANDIDATES = 256


@dataclass(frozen=True)
class SamplingRow:
    """A plain RowInput for callers without a sequence object of their own."""

    params: SamplingParams
    generator: torch.Generator | None = None
    prompt_token_ids: Sequence[int] = ()
    output_token_ids: Sequence[int] = ()


@dataclass(frozen=True)
class SamplingRows:
    """One step's per-row settings as tensors, built once, plus flags that let work be skipped.

    Greedy rows (temperature 0) have their filters switched off here, so the strategies leave
    them alone and they stay argmax-able; their generators are never drawn from. A sampled row
    whose generator is None draws from torch's default generator.
    """

    num_rows: int
    temperature: Tensor  # (B,) float32, 0 = greedy
    top_k: Tensor  # (B,) int64, 0 = off
    top_p: Tensor  # (B,) float32, 1 = off
    min_p: Tensor  # (B,) float32, 0 = off
    sampled_index: Tensor  # (S,) int64: rows drawn at random, ascending
    top_k_index: Tensor  # (R,) int64: rows with top_k > 0
    top_p_index: Tensor  # (R,) int64: rows with top_p < 1
    logprob_index: Tensor  # (L,) int64: rows that asked for logprobs
    sampled_generators: tuple[torch.Generator | None, ...]  # one per sampled row
    logprob_rows: tuple[int, ...]  # same rows as logprob_index, on the host
    top_logprobs: tuple[int, ...]  # (B,) how many alternatives each row wants, 0 = none
    penalties: PenaltyRows | None
    logit_bias: tuple[Tensor, Tensor, Tensor] | None  # (rows, token ids, biases), flat
    max_top_k: int
    top_p_candidates: int  # how many best tokens top-p examines before sorting a row whole
    max_top_logprobs: int
    all_greedy: bool
    any_greedy: bool
    any_temperature: bool  # some sampled row has temperature != 1
    any_top_k: bool
    any_top_p: bool
    any_min_p: bool
    any_penalties: bool
    any_logprobs: bool

    @classmethod
    def build(cls, rows: Sequence[RowInput], device: torch.device | str = "cpu") -> SamplingRows:
        params = [row.params for row in rows]
        sampled = [i for i, p in enumerate(params) if not p.is_greedy]
        top_k = [0 if p.is_greedy else p.top_k for p in params]
        top_p = [1.0 if p.is_greedy else p.top_p for p in params]
        min_p = [0.0 if p.is_greedy else p.min_p for p in params]
        floats = torch.tensor(
            [[p.temperature for p in params], top_p, min_p], dtype=torch.float32
        ).to(device)  # (3, B)
        top_p_ks = [top_k[i] for i in sampled if top_p[i] < 1]
        if top_p_ks and min(top_p_ks) > 0:
            top_p_candidates = max(top_p_ks)  # each nucleus lies inside its row's top k
        else:
            top_p_candidates = max([TOP_P_CANDIDATES, *top_p_ks])
        logprob_rows = tuple(i for i, p in enumerate(params) if p.logprobs)
        top_logprobs = tuple(p.top_logprobs if p.logprobs else 0 for p in params)
        penalties = PenaltyRows.build(rows, device)
        biased = [(i, t, b) for i, p in enumerate(params) for t, b in p.logit_bias]
        logit_bias = None
        if biased:
            rows_, ids, biases = zip(*biased, strict=True)
            logit_bias = (
                torch.tensor(rows_, dtype=torch.long, device=device),
                torch.tensor(ids, dtype=torch.long, device=device),
                torch.tensor(biases, dtype=torch.float32, device=device),
            )
        return cls(
            num_rows=len(params),
            temperature=floats[0],
            top_k=torch.tensor(top_k, dtype=torch.long, device=device),
            top_p=floats[1],
            min_p=floats[2],
            sampled_index=torch.tensor(sampled, dtype=torch.long, device=device),
            top_k_index=_index([k > 0 for k in top_k], device),
            top_p_index=_index([p < 1 for p in top_p], device),
            logprob_index=torch.tensor(logprob_rows, dtype=torch.long, device=device),
            sampled_generators=tuple(rows[i].generator for i in sampled),
            logprob_rows=logprob_rows,
            top_logprobs=top_logprobs,
            penalties=penalties,
            logit_bias=logit_bias,
            max_top_k=max(top_k, default=0),
            top_p_candidates=top_p_candidates,
            max_top_logprobs=max(top_logprobs, default=0),
            all_greedy=not sampled,
            any_greedy=len(sampled) < len(params),
            any_temperature=any(params[i].temperature != 1 for i in sampled),
            any_top_k=any(k > 0 for k in top_k),
            any_top_p=bool(top_p_ks),
            any_min_p=any(p > 0 for p in min_p),
            any_penalties=penalties is not None,
            any_logprobs=bool(logprob_rows),
        )


def _index(flags: list[bool], device: torch.device | str) -> Tensor:
    return torch.tensor([i for i, f in enumerate(flags) if f], dtype=torch.long, device=device)
