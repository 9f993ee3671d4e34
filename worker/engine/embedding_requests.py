"""Embedding intake: an embeddings request checked, one prefill-only Sequence per input."""

from __future__ import annotations

from collections.abc import Sequence as SequenceABC

from common.embedding import EmbedSettings
from common.sampling_params import SamplingParams
from worker.engine.embedding import PooledRows
from worker.engine.request import RequestFactory
from worker.engine.sequence import EventSink, OutputReaders, Sequence
from worker.errors import ContextLengthExceeded, RequestError
from worker.model.pooling import POOLING_CHOICES, ModelPooling, Pooling
from worker.text.stop_strings import StopStringMatcher

EmbeddingInput = str | SequenceABC[int]  # text (tokenized raw, no template) or token ids
NO_SAMPLING = SamplingParams()  # an embedding samples nothing; its settings are never read


class EmbeddingRequests:
    """Checks and builds embeddings for one served model: how it pools, how wide its vectors
    are, how long an input may be."""

    def __init__(
        self, requests: RequestFactory, pooling: ModelPooling, hidden_size: int, model_name: str
    ) -> None:
        self.requests = requests
        self.pooling = pooling
        self.hidden_size = hidden_size
        self.model_name = model_name

    def build(
        self,
        request_id: str,
        inputs: SequenceABC[EmbeddingInput],
        settings: EmbedSettings,
        sink: EventSink,
    ) -> list[Sequence]:
        """One sequence per input, index i for input i. RequestError where this model does
        not embed or `dimensions` does not fit it, or naming `input` for an empty or unknown
        one; ContextLengthExceeded for one longer than the context. Nothing is built unless
        every input passes."""
        pooling = self.check(settings)
        token_ids = self.token_ids(inputs)
        pools = [
            PooledRows(pooling, self.pooling.normalize, settings.dimensions) for _ in token_ids
        ]
        return prefill_only(self.requests, request_id, token_ids, pools, sink)

    def check(self, settings: EmbedSettings) -> Pooling:
        """This model's pooling, if it embeds and `settings` fit it."""
        pooling = self.pooling.pooling
        if pooling is Pooling.RANK:
            message = f"model {self.model_name!r} is a reranker: it answers /v1/rerank"
            raise RequestError(message, "model")
        if pooling is None:
            choices = "|".join(c for c in POOLING_CHOICES if c != Pooling.RANK)
            message = (
                f"model {self.model_name!r} has no pooling ({self.pooling.reason}); "
                f"serve it with --pooling {choices}"
            )
            raise RequestError(message, "model")
        dimensions = settings.dimensions
        if dimensions is not None and not 1 <= dimensions <= self.hidden_size:
            message = f"dimensions must be in [1, {self.hidden_size}] for this model"
            raise RequestError(f"{message}, got {dimensions}", "dimensions")
        return pooling

    def token_ids(self, inputs: SequenceABC[EmbeddingInput]) -> list[list[int]]:
        """Each input's token ids: text tokenized as it stands (no chat template), ids
        checked against the vocabulary."""
        if not inputs:
            raise RequestError("input must not be empty", "input")
        limit = self.requests.max_model_len
        ids: list[list[int]] = []
        for i, item in enumerate(inputs):
            where = f"input[{i}]"
            if isinstance(item, str):
                if not item:
                    raise RequestError(f"{where} must not be empty", "input")
                tokens = self.requests.prompt_token_ids(item, chat=False)
            else:
                tokens = list(item)
                self.requests.check_in_vocab(tokens, where, "input")
            if not tokens:
                raise RequestError(f"{where} must not be empty", "input")
            if len(tokens) > limit:
                message = f"{where} is too long: {len(tokens)} tokens > {limit}, the context"
                raise ContextLengthExceeded(message, "input")
            ids.append(tokens)
        return ids


def prefill_only(
    requests: RequestFactory,
    request_id: str,
    token_ids: list[list[int]],
    pools: list[PooledRows],
    sink: EventSink,
) -> list[Sequence]:
    """One prefill-only sequence per input (index i for input i) that pools its rows into
    pools[i]: it samples nothing and ends once its input is computed."""
    seq_ids = requests.new_seq_ids(len(token_ids))
    tokenizer = requests.tokenizer
    return [
        Sequence(
            seq_id=seq_id,
            request_id=request_id,
            index=i,
            token_ids=ids,
            num_prompt_tokens=len(ids),
            params=NO_SAMPLING,
            sink=sink,
            generator=None,
            output=OutputReaders(tokenizer.detokenizer(ids), StopStringMatcher(())),
            max_total_tokens=len(ids),
            embedding=pooled,
        )
        for i, (seq_id, ids, pooled) in enumerate(zip(seq_ids, token_ids, pools, strict=True))
    ]
