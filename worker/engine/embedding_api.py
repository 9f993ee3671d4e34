"""EmbeddingAPI: the engine's embeddings, queued with a sink or waited for as vectors."""

from __future__ import annotations

import queue
from collections.abc import Sequence as SequenceABC

import torch

from common.embedding import EmbedSettings
from worker.engine.embedding_requests import EmbeddingInput, EmbeddingRequests
from worker.engine.engine_core import EngineCore
from worker.engine.event_stream import each_item_result
from worker.engine.sequence import EventSink, TokenEvent

ALL_DIMENSIONS = EmbedSettings()


class EmbeddingAPI:
    """Embeddings run as prefill-only sequences of the engine's one scheduler, beside its
    generations, sharing its prefix cache; each input ends with one event holding its
    vector. The engine sets `embeddings` and `scheduler` when it loads the model."""

    embeddings: EmbeddingRequests
    scheduler: EngineCore

    def submit_embeddings(
        self,
        inputs: SequenceABC[EmbeddingInput],
        sink: EventSink,
        request_id: str,
        settings: EmbedSettings = ALL_DIMENSIONS,
    ) -> list[int]:
        """Queue one embedding per input (text, tokenized as it stands, or token ids), event
        index i for input i; each input's token count. Raises RequestError with nothing
        queued when the model does not embed or an input or setting is refused."""
        sequences = self.embeddings.build(request_id, inputs, settings, sink)
        self.scheduler.add(sequences)
        return [seq.num_prompt_tokens for seq in sequences]

    def embed(
        self, inputs: SequenceABC[EmbeddingInput], dimensions: int | None = None
    ) -> list[torch.Tensor]:
        """Each input's vector (float32), in order, once all are computed."""
        events: queue.Queue[TokenEvent] = queue.Queue()
        request_id = self.embeddings.requests.new_request_id()
        self.submit_embeddings(inputs, events.put, request_id, EmbedSettings(dimensions))
        return each_item_result(
            events,
            len(inputs),
            lambda event: event.embedding,
            lambda: self.scheduler.abort(request_id),
            "embedding",
        )
