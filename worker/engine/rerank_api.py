"""RerankAPI: the engine's reranks, queued with a sink or waited for as scores."""

from __future__ import annotations

import queue
from collections.abc import Sequence as SequenceABC

from common.rerank import RerankSettings
from worker.engine.engine_core import EngineCore
from worker.engine.event_stream import each_item_result
from worker.engine.rerank_requests import RerankRequests
from worker.engine.sequence import EventSink, TokenEvent


class RerankAPI:
    """Reranks run as prefill-only sequences of the engine's one scheduler, one per document,
    beside its generations; the documents of one query share its tokens in the prefix cache.
    Each document ends with one event holding its score. The engine sets `reranks` and
    `scheduler` when it loads the model."""

    reranks: RerankRequests
    scheduler: EngineCore

    def submit_rerank(
        self,
        documents: SequenceABC[str],
        settings: RerankSettings,
        sink: EventSink,
        request_id: str,
    ) -> list[int]:
        """Queue one score per document against `settings.query`, event index i for document
        i; each document's prompt token count. Raises RequestError with nothing queued when
        the model does not rerank or the query, a document or a setting is refused."""
        sequences = self.reranks.build(request_id, documents, settings, sink)
        self.scheduler.add(sequences)
        return [seq.num_prompt_tokens for seq in sequences]

    def rerank(
        self,
        query: str,
        documents: SequenceABC[str],
        instruction: str | None = None,
        max_tokens_per_doc: int | None = None,
    ) -> list[float]:
        """Each document's relevance score to `query` (in [0, 1]), in document order, once
        all are computed."""
        events: queue.Queue[TokenEvent] = queue.Queue()
        request_id = self.reranks.requests.new_request_id()
        settings = RerankSettings(query, instruction, max_tokens_per_doc)
        self.submit_rerank(documents, settings, events.put, request_id)
        return each_item_result(
            events,
            len(documents),
            lambda event: event.score,
            lambda: self.scheduler.abort(request_id),
            "rerank",
        )
