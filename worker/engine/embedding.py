"""PooledRows: a prefill-only sequence's kept final hidden states, and its vector or score."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from worker.model.pooling import Pooling
from worker.model.score_head import ScoreHead


@dataclass(eq=False)
class PooledRows:
    """Invariant: for mean pooling, `total` is the sum of the final-norm rows of positions
    [0, num_rows) of the input; for cls and last, the one row they take, once computed.

    A mean's chunks come in order of position from token 0 (such a sequence takes no
    prefix-cache hit); rows at positions already pooled (a preempted sequence computing its
    input again from the start) are skipped, so a recomputation never counts a row twice.
    A reranked document (Pooling.RANK, with its model's `head`) keeps its last row, as last
    pooling does, and ends with that row's score instead of a vector.
    """

    pooling: Pooling
    normalize: bool  # scale the vector to unit length (L2)
    dimensions: int | None = None  # keep this many components, then scale to unit length
    head: ScoreHead | None = None  # a reranker's, with Pooling.RANK
    total: torch.Tensor | None = None  # (hidden,) float32
    num_rows: int = 0

    @property
    def takes_prefix_hits(self) -> bool:
        """Only the last row is pooled: whatever the cache holds, that row is computed."""
        return self.pooling in (Pooling.LAST, Pooling.RANK)

    def hidden(self, start: int, end: int, length: int) -> Literal["none", "first", "last", "all"]:
        """The rows the chunk of positions [start, end) of an input of `length` keeps (a
        HiddenRows value: the plan's types name sequences, which name this class)."""
        if self.pooling is Pooling.MEAN:
            return "all"
        if self.pooling is Pooling.CLS:
            return "first" if start == 0 else "none"
        return "last" if end == length else "none"

    def add(self, start: int, rows: torch.Tensor) -> None:
        """The rows (R, hidden) a chunk starting at position `start` kept (`hidden`'s)."""
        if self.pooling is not Pooling.MEAN:  # a copy: not a view keeping the step's rows
            self.total = rows[-1].float().clone()
            return
        assert start <= self.num_rows, "a mean's rows come from token 0 on, without gaps"
        fresh = rows[self.num_rows - start :].float()
        if fresh.shape[0]:
            self.total = fresh.sum(0) if self.total is None else self.total + fresh.sum(0)
            self.num_rows = start + rows.shape[0]

    def score(self) -> float:
        """A reranked document's relevance score, by its model's head."""
        if self.head is None:
            raise RuntimeError("an embedding has no score head")
        return self.head.score(self._pooled())

    def _pooled(self) -> torch.Tensor:
        """The pooled row(s): a mean's sum, or the one row kept."""
        if self.total is None:
            raise RuntimeError("no row of this input was pooled")
        return self.total

    def vector(self) -> torch.Tensor:
        """(dimensions or hidden,) float32 on the CPU: the input's embedding."""
        total = self._pooled()
        vector = total / self.num_rows if self.pooling is Pooling.MEAN else total
        if self.dimensions is not None:
            vector = vector[: self.dimensions]
        if self.normalize or self.dimensions is not None:
            vector = F.normalize(vector, dim=0)
        return vector.cpu()
