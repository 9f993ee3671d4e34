"""What a rerank request asks beyond its documents: the query they are scored against."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RerankSettings:
    """Submit.rerank: score each of the prompts (the documents) against `query` instead of
    generating. `instruction` replaces the model's default task line (Qwen3-Reranker's
    `<Instruct>`); `max_tokens_per_doc` cuts each document to that many tokens (Cohere's
    parameter; None: a document too long for the context is refused). The worker checks
    them against its model, as it checks EmbedSettings."""

    query: str
    instruction: str | None = None
    max_tokens_per_doc: int | None = None
