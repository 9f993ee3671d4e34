"""/v1/rerank (Jina's and Cohere's shape): a query and documents in, scored results out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.rerank import RerankSettings
from common.sampling_params import SamplingParams
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.base import ChatRequest, ChatResult, ChoiceResult
from gateway.protocols.rerank_body import RerankBody
from gateway.protocols.unstreamed import UnstreamedBuilder

NO_SAMPLING = SamplingParams()  # a rerank samples nothing


@dataclass(frozen=True)
class RerankRequest(ChatRequest):
    """A rerank request: `prompts` are its documents, one choice each, and `rerank` holds
    the query for the worker; `top_n` and `return_documents` stay here for the answer."""

    top_n: int | None = None
    return_documents: bool = True

    @property
    def routing_text(self) -> str:
        """The query first, as every document's prompt holds it before the document."""
        query = self.rerank.query if self.rerank is not None else ""
        return "\n".join([query, *(p for p in self.prompts or [] if isinstance(p, str))])


class RerankResponseBuilder(UnstreamedBuilder):
    """The documents' results by relevance, highest first, from one Finished with its score
    per document; errors in OpenAI's shape."""

    name = "rerank"
    id_prefix = "rerank-"

    def parse(self, body: Any) -> ChatRequest:
        rerank = RerankBody.parse(body)
        return RerankRequest(
            model=rerank.model,
            messages=[],
            params=NO_SAMPLING,
            prompts=list(rerank.documents),
            rerank=RerankSettings(rerank.query, rerank.instruction, rerank.max_tokens_per_doc),
            top_n=rerank.top_n,
            return_documents=rerank.return_documents is not False,
        )

    def format_response(self, result: ChatResult) -> dict[str, Any]:
        request = result.request
        if not isinstance(request, RerankRequest):  # the fold always hands its request on
            raise GatewayError(ErrorKind.INTERNAL, "a rerank answer without its request")
        documents = request.prompts or []
        # Highest score first; equal scores keep the documents' order.
        ranked = sorted(result.choices, key=lambda choice: (-_score(choice), choice.index))
        results = []
        for choice in ranked[: request.top_n]:
            entry: dict[str, Any] = {"index": choice.index, "relevance_score": _score(choice)}
            if request.return_documents:
                entry["document"] = {"text": documents[choice.index]}
            results.append(entry)
        tokens = result.prompt_tokens
        return {
            "id": result.request_id,
            "model": result.model,
            "results": results,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def _score(choice: ChoiceResult) -> float:
    if choice.score is None:  # a worker that answered a document without its score
        raise GatewayError(ErrorKind.INTERNAL, f"document {choice.index} came back without a score")
    return choice.score
