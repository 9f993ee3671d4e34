"""Rerank intake: a query and its documents checked, one prefill-only Sequence per document."""

from __future__ import annotations

from collections.abc import Sequence as SequenceABC

from common.rerank import RerankSettings
from worker.engine.embedding import PooledRows
from worker.engine.embedding_requests import prefill_only
from worker.engine.request import RequestFactory
from worker.engine.sequence import EventSink, Sequence
from worker.errors import ContextLengthExceeded, RequestError
from worker.model.pooling import ModelPooling, Pooling
from worker.model.score_head import ScoreHead
from worker.text.rerank_prompt import RerankPrompt


class RerankRequests:
    """Checks and builds reranks for one served model: whether it reranks (its pooling and
    head), the prompt a query and a document make, how long one may be."""

    def __init__(
        self,
        requests: RequestFactory,
        pooling: ModelPooling,
        head: ScoreHead | None,
        prompt: RerankPrompt,
        model_name: str,
    ) -> None:
        self.requests = requests
        self.pooling = pooling
        self.head = head
        self.prompt = prompt
        self.model_name = model_name

    def build(
        self,
        request_id: str,
        documents: SequenceABC[str],
        settings: RerankSettings,
        sink: EventSink,
    ) -> list[Sequence]:
        """One sequence per document, index i for document i. RequestError where this model
        does not rerank, or naming the parameter a query, instruction or document breaks;
        ContextLengthExceeded for a prompt longer than the context. Nothing is built unless
        every document passes."""
        head = self.check(settings)
        token_ids = self.token_ids(documents, settings)
        pools = [PooledRows(Pooling.RANK, False, head=head) for _ in token_ids]
        return prefill_only(self.requests, request_id, token_ids, pools, sink)

    def check(self, settings: RerankSettings) -> ScoreHead:
        """This model's head, if it reranks and `settings` fit it."""
        if self.pooling.pooling is not Pooling.RANK or self.head is None:
            why = self.pooling.reason or "its files name no reranker"
            message = (
                f"model {self.model_name!r} is not a reranker ({why}); serve a reranker, or "
                "this model with --pooling rank"
            )
            raise RequestError(message, "model")
        if not settings.query:
            raise RequestError("query must not be empty", "query")
        if settings.instruction is not None and not self.prompt.takes_instruction:
            message = f"this model's rerank template ({self.prompt.source}) takes no instruction"
            raise RequestError(message, "instruction")
        cut = settings.max_tokens_per_doc
        if cut is not None and cut < 1:
            raise RequestError(f"max_tokens_per_doc must be >= 1, got {cut}", "max_tokens_per_doc")
        return self.head

    def token_ids(self, documents: SequenceABC[str], settings: RerankSettings) -> list[list[int]]:
        """Each document's prompt: the head (system turn, instruction, query) tokenized once
        and shared, so every document's sequence starts with the same tokens and the prefix
        cache computes them once; then the document, cut to max_tokens_per_doc; then the
        tail. The head's trailing spaces go with the document: a BPE tokenizer joins a space
        to the word after it, and the model card tokenizes `<Document>: {doc}` in one piece."""
        if not documents:
            raise RequestError("documents must not be empty", "documents")
        parts = self.prompt.parts(settings.query, settings.instruction)
        head_text = parts.head.rstrip(" ")
        spaces = parts.head[len(head_text) :]
        head = self._encoded(head_text, True, "query")
        tail = self._encoded(parts.tail, False, "query")
        limit = self.requests.max_model_len
        if len(head) + len(tail) >= limit:
            fixed = len(head) + len(tail)
            message = f"query is too long: {fixed} tokens with the template >= {limit}, the context"
            raise ContextLengthExceeded(message, "query")
        prompts = []
        for i, document in enumerate(documents):
            ids = self._encoded(spaces + document, False, "documents")
            ids = ids[: settings.max_tokens_per_doc]
            total = len(head) + len(ids) + len(tail)
            if total > limit:
                message = (
                    f"documents[{i}] is too long: {total} tokens with the query > {limit}, "
                    "the context"
                )
                raise ContextLengthExceeded(message, "documents")
            prompts.append(head + ids + tail)
        return prompts

    def _encoded(self, text: str, special: bool, param: str) -> list[int]:
        """`text`'s token ids (with the tokenizer's own special tokens where `special`), or
        a RequestError naming `param` for text that cannot be encoded (a lone surrogate)."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            message = f"{param} must be valid Unicode text: it holds a lone surrogate"
            raise RequestError(message, param) from None
        return self.requests.tokenizer.encode(text, add_special_tokens=special)
