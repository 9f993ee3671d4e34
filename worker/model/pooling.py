"""Pooling: how a vector, or a reranker's score, is made of a model's final hidden states."""

from __future__ import annotations

from dataclasses import dataclass

from common.text_enum import TextEnum


class Pooling(TextEnum):
    """Which rows of the final norm's output make an input's vector."""

    LAST = "last"  # the last token's row (Qwen3-Embedding and other decoder embedders)
    MEAN = "mean"  # the mean of every token's row
    CLS = "cls"  # the first token's row
    # A reranker: the last token's row scored by its head (worker/model/score_head.py); it
    # answers /v1/rerank, not /v1/embeddings.
    RANK = "rank"


POOLING_CHOICES = tuple(p.value for p in Pooling)


@dataclass(frozen=True)
class ModelPooling:
    """How a served model embeds or reranks: from its files (worker/model/pooling_files.py)
    or `--pooling`. `pooling` None: it does neither, and `reason` says why."""

    pooling: Pooling | None
    normalize: bool = True  # vectors scaled to unit length (L2), as OpenAI's are
    reason: str = ""  # why there is no pooling, or where the pooling came from

    def describe(self) -> str:
        """One line for the worker's log: which pooling and where it came from, or why none."""
        if self.pooling is None:
            return f"none ({self.reason})"
        scaled = ", normalized" if self.normalize else ""
        return f"{self.pooling} pooling ({self.reason}){scaled}"
