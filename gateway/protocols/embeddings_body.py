"""The body of OpenAI's /v1/embeddings: inputs as text or token ids, and the vectors' form."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import PlainValidator

from common.validation import MAX_COUNT, integer, invalid, text
from gateway.protocols.bodies import RequestBody, Required
from gateway.protocols.completions_body import prompt_list

MAX_INPUTS = 2048  # OpenAI's limit on the inputs of one request


def _inputs(value: Any) -> list[str | list[int]]:
    """A string, an array of strings, an array of token ids, or an array of arrays of token
    ids (Completions' `prompt` grammar); each string or id array is one input."""
    inputs = prompt_list(value)
    if len(inputs) > MAX_INPUTS:
        raise invalid(f"may hold at most {MAX_INPUTS} inputs, got {len(inputs)}")
    return inputs


class EmbeddingsBody(RequestBody):
    """POST /v1/embeddings."""

    model: Annotated[str, text()] | None = None
    input: Annotated[list[str | list[int]], PlainValidator(_inputs), Required]
    encoding_format: Literal["float", "base64"] | None = None
    # Checked against the model by its worker: at most its hidden size.
    dimensions: Annotated[int, integer(1, None, MAX_COUNT)] | None = None
    user: Annotated[str, text()] | None = None  # accepted; changes nothing
