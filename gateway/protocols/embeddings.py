"""OpenAI's /v1/embeddings: inputs in, one vector each out, as floats or base64."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from common.embedding import EmbedSettings, unpack_vector
from common.sampling_params import SamplingParams
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.base import ChatRequest, ChatResult, ChoiceResult
from gateway.protocols.embeddings_body import EmbeddingsBody
from gateway.protocols.unstreamed import UnstreamedBuilder

NO_SAMPLING = SamplingParams()  # an embedding samples nothing


@dataclass(frozen=True)
class EmbeddingsRequest(ChatRequest):
    """An embeddings request: `prompts` are its inputs, one choice each; `embed` goes to the
    worker, `encoding_format` stays here for the answer."""

    encoding_format: str = "float"


class EmbeddingsResponseBuilder(UnstreamedBuilder):
    """A vector per input, in input order, from one Finished with its vector per input;
    errors in OpenAI's shape."""

    name = "embeddings"
    id_prefix = "embd-"

    def parse(self, body: Any) -> ChatRequest:
        embeddings = EmbeddingsBody.parse(body)
        return EmbeddingsRequest(
            model=embeddings.model,
            messages=[],
            params=NO_SAMPLING,
            prompts=embeddings.input,
            embed=EmbedSettings(embeddings.dimensions),
            encoding_format=embeddings.encoding_format or "float",
        )

    def format_response(self, result: ChatResult) -> dict[str, Any]:
        base64_wanted = (
            isinstance(result.request, EmbeddingsRequest)
            and result.request.encoding_format == "base64"
        )
        choices = sorted(result.choices, key=lambda choice: choice.index)
        return {
            "object": "list",
            "data": [
                {
                    "object": "embedding",
                    "index": choice.index,
                    "embedding": _encoded(_vector(choice), base64_wanted),
                }
                for choice in choices
            ],
            "model": result.model,
            "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
        }


def _vector(choice: ChoiceResult) -> bytes:
    if choice.embedding is None:  # a worker that answered an embedding without its vector
        raise GatewayError(ErrorKind.INTERNAL, f"input {choice.index} came back without a vector")
    return choice.embedding


def _encoded(raw: bytes, as_base64: bool) -> list[float] | str:
    """OpenAI's two forms: the floats, or their float32 little-endian bytes in base64 (what
    the SDK asks for by default and decodes)."""
    return base64.b64encode(raw).decode("ascii") if as_base64 else unpack_vector(raw)
