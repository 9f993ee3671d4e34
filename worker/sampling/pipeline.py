"""SamplingPipeline: temperature, top-k, top-p, min-p over a batch, then a seeded draw per row."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch
from torch import Tensor

from worker.sampling.rows import SamplingRows

_NEG_INF = float("-inf")
# Sampled rows divide by at least this: a tinier temperature would overflow logits to inf (and
# softmax to NaN) while the distribution is already one-hot at 1e-5.
MIN_TEMPERATURE = 1e-5


def take_rows(logits: Tensor, index: Tensor) -> Tensor:
    """The rows in index (ascending); the tensor itself when index covers every row."""
    return logits if index.numel() == logits.shape[0] else logits.index_select(0, index)


def _mask_below_(logits: Tensor, index: Tensor, rows: Tensor, threshold: Tensor) -> Tensor:
    """Write -inf below each threshold (R, 1) into the rows `index` (R,) of logits, whose
    values `rows` (R, V) are either logits itself (every row) or a copy."""
    masked = rows.masked_fill_(rows < threshold, _NEG_INF)
    return masked if index.numel() == logits.shape[0] else logits.index_copy_(0, index, masked)


class BaseSamplingStrategy(ABC):
    """One transformation of (B, V) float32 logits; filtered-out entries become -inf.

    Strategies work in place (a full pass over B x V costs milliseconds on a small CPU); the
    pipeline hands them a copy it owns.
    """

    @abstractmethod
    def apply(self, logits: Tensor, rows: SamplingRows) -> Tensor:
        """Transform logits, possibly in place, and return the result."""


class TemperatureStrategy(BaseSamplingStrategy):
    """Divide each sampled row by its temperature; greedy rows are left as they are."""

    def apply(self, logits: Tensor, rows: SamplingRows) -> Tensor:
        if not rows.any_temperature:
            return logits
        temperature = rows.temperature.clamp(min=MIN_TEMPERATURE)
        divisor = torch.where(rows.temperature > 0, temperature, 1.0).unsqueeze(1)  # (B, 1)
        return logits.div_(divisor)


class TopKStrategy(BaseSamplingStrategy):
    """Keep each row's k largest logits (ties with the k-th are kept too)."""

    def apply(self, logits: Tensor, rows: SamplingRows) -> Tensor:
        if not rows.any_top_k:
            return logits
        vocab = logits.shape[-1]
        sub = take_rows(logits, rows.top_k_index)  # (R, V)
        k = rows.top_k.index_select(0, rows.top_k_index).clamp(max=vocab)  # (R,)
        best = sub.topk(min(rows.max_top_k, vocab), dim=-1).values  # (R, K) descending
        return _mask_below_(logits, rows.top_k_index, sub, best.gather(1, (k - 1).unsqueeze(1)))


class TopPStrategy(BaseSamplingStrategy):
    """Keep each row's smallest set of best tokens whose probability reaches top_p.

    A token stays while the mass of the tokens ranked above it is below p; ties with the last
    kept token stay too. The cut-off is found among the row's top_p_candidates best tokens,
    which gives the same cumulative sums as a full sort up to that rank, and a row is sorted
    whole only when its nucleus is wider than that.
    """

    def apply(self, logits: Tensor, rows: SamplingRows) -> Tensor:
        if not rows.any_top_p:
            return logits
        index = rows.top_p_index
        sub = take_rows(logits, index)  # (R, V)
        top_p = rows.top_p.index_select(0, index).unsqueeze(1)  # (R, 1)
        probs = torch.softmax(sub, dim=-1)  # (R, V)
        num_candidates = min(rows.top_p_candidates, sub.shape[-1])
        values, ids = sub.topk(num_candidates, dim=-1)  # (R, K) descending
        threshold, is_inside = _nucleus_cut(values, probs.gather(1, ids), top_p)
        if num_candidates < sub.shape[-1]:
            wide = (~is_inside).nonzero().squeeze(1)
            if wide.numel() > 0:
                values, ids = sub.index_select(0, wide).sort(dim=-1, descending=True)
                wide_probs = probs.index_select(0, wide).gather(1, ids)
                wide_cut, _ = _nucleus_cut(values, wide_probs, top_p.index_select(0, wide))
                threshold = threshold.index_copy(0, wide, wide_cut)
        return _mask_below_(logits, index, sub, threshold)


def _nucleus_cut(values: Tensor, probs: Tensor, top_p: Tensor) -> tuple[Tensor, Tensor]:
    """Lowest kept logit (R, 1) from the best K logits (R, K) in descending order and their
    probabilities, and whether each row's nucleus ends inside those K (R,)."""
    num_before = (probs.cumsum(dim=-1) < top_p).sum(dim=-1, keepdim=True)  # (R, 1)
    last = values.shape[-1] - 1
    is_inside = (num_before <= last).squeeze(1) | torch.isneginf(values[:, last])
    return values.gather(1, num_before.clamp(max=last)), is_inside


class MinPStrategy(BaseSamplingStrategy):
    """Drop tokens less likely than min_p times the row's most likely token."""

    def apply(self, logits: Tensor, rows: SamplingRows) -> Tensor:
        if not rows.any_min_p:
            return logits
        # p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p); log(0) = -inf keeps all.
        threshold = logits.amax(dim=-1, keepdim=True) + torch.log(rows.min_p).unsqueeze(1)
        return logits.masked_fill_(logits < threshold, _NEG_INF)


class SamplingPipeline:
    """Strategies applied in order, then softmax and one inverse-CDF draw per sampled row."""

    def __init__(self, strategies: Sequence[BaseSamplingStrategy]) -> None:
        self.strategies = tuple(strategies)

    @classmethod
    def default(cls) -> SamplingPipeline:
        return cls([TemperatureStrategy(), TopKStrategy(), TopPStrategy(), MinPStrategy()])

    def apply(self, logits: Tensor, rows: SamplingRows) -> Tensor:
        """Filtered logits (B, V), in a copy: the input is never written."""
        logits = logits.clone()
        for strategy in self.strategies:
            logits = strategy.apply(logits, rows)
        return logits

    def draw(self, logits: Tensor, rows: SamplingRows) -> Tensor:
        """Token ids (S,) of the sampled rows, each from one uniform of the row's generator."""
        probs = torch.softmax(take_rows(self.apply(logits, rows), rows.sampled_index), dim=-1)
        return inverse_cdf(probs, _uniforms(rows.sampled_generators, probs.device))


def _uniforms(generators: Sequence[torch.Generator | None], device: torch.device) -> Tensor:
    """One uniform in [0, 1) per generator (S,), in order; None draws from torch's default."""
    if not generators:
        return torch.empty(0, device=device)
    draws = [
        torch.rand(1, generator=g, device=g.device if g is not None else "cpu") for g in generators
    ]
    return torch.cat([d.to(device) for d in draws])


def inverse_cdf(probs: Tensor, uniforms: Tensor) -> Tensor:
    """Token (S,) of each row of probs (S, V) where its cumulative sum first exceeds u (S,).

    Tokens with zero probability are never returned: if rounding leaves the last cumulative
    value at or below u, the row's last token with nonzero probability is taken.
    """
    cdf = probs.cumsum(dim=-1)  # (S, V)
    ids = torch.searchsorted(cdf, uniforms.unsqueeze(1), right=True).squeeze(1)  # (S,)
    vocab = probs.shape[-1]
    overflow = ids >= vocab
    if bool(overflow.any()):
        last = vocab - 1 - (probs.flip(-1) > 0).to(torch.uint8).argmax(dim=-1)
        ids = torch.where(overflow, last, ids)
    return ids
