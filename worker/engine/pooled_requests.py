"""What a served model answers besides generations, from its files: embeddings or reranks."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from worker.engine.embedding_requests import EmbeddingRequests
from worker.engine.request import RequestFactory
from worker.engine.rerank_requests import RerankRequests
from worker.model.gguf_tensors import read_gguf_header
from worker.model.model_dir import gguf_source
from worker.model.pooling import ModelPooling, Pooling
from worker.model.pooling_files import model_pooling
from worker.model.score_head import ScoreHead, ScoreHeadError, read_score_head
from worker.text.rerank_prompt import rerank_prompt

log = logging.getLogger(__name__)


def pooled_requests(
    model_dir: Path,
    override: str | None,
    requests: RequestFactory,
    hidden_size: int,
    model_name: str,
    device: torch.device,
) -> tuple[EmbeddingRequests, RerankRequests]:
    """The model's embeddings and reranks, one of which (or neither) it answers: its pooling
    (its files', or `override`: --pooling) and, for a reranker, its score head and prompt.
    A reranker whose files hold no head has no pooling, and the log says why."""
    pooling = model_pooling(model_dir, override)
    head: ScoreHead | None = None
    if pooling.pooling is Pooling.RANK:
        try:
            head = read_score_head(model_dir, requests.tokenizer.backend, device)
        except ScoreHeadError as exc:
            pooling = ModelPooling(None, reason=f"{pooling.reason}, but {exc}")
    log.info("embeddings and rerank: %s", pooling.describe())
    source = gguf_source(model_dir)
    prompt = rerank_prompt(read_gguf_header(source).metadata if source is not None else {})
    if head is not None:
        log.info("rerank: scored by %s; prompt: %s template", head.source, prompt.source)
    embeddings = EmbeddingRequests(requests, pooling, hidden_size, model_name)
    return embeddings, RerankRequests(requests, pooling, head, prompt, model_name)
