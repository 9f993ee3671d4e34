"""The body of /v1/rerank (Jina's and Cohere's shape): a query, its documents, the answer's form."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import PlainValidator

from common.validation import MAX_COUNT, boolean, check_text, integer, invalid, json_type, text
from gateway.protocols.bodies import RequestBody, Required, Unsupported, is_null

# Cohere asks for at most 1,000 documents a request; each is a prompt of its own here.
MAX_DOCUMENTS = 1000


def _documents(value: Any) -> list[str]:
    """An array of strings, or of objects with a `text` string (Jina's and Cohere's v1
    form; other keys are ignored, an `image` refused): each document's text."""
    if not isinstance(value, list):
        raise invalid(f"must be an array of strings, got {json_type(value)}")
    if not value:
        raise invalid("must not be empty")
    if len(value) > MAX_DOCUMENTS:
        raise invalid(f"may hold at most {MAX_DOCUMENTS} documents, got {len(value)}")
    documents = []
    for i, item in enumerate(value):
        if isinstance(item, dict):
            if item.get("image") is not None:
                raise invalid("is an image: this server reranks text", f"{i}.image")
            if "text" not in item:
                raise invalid("is required", f"{i}.text")
            item = item["text"]
            documents.append(check_text(item, at=f"{i}.text"))
        elif isinstance(item, str):
            documents.append(check_text(item, at=str(i)))
        else:
            reason = f"must be a string or an object with a text, got {json_type(item)}"
            raise invalid(reason, str(i))
    return documents


class RerankBody(RequestBody):
    """POST /v1/rerank and /rerank."""

    # Cohere v1's structured documents and chunking: not implemented here.
    unsupported: ClassVar[Unsupported] = {"rank_fields": is_null, "max_chunks_per_doc": is_null}

    model: Annotated[str, text()] | None = None
    query: Annotated[str, text(non_empty=True), Required]
    documents: Annotated[list[str], PlainValidator(_documents), Required]
    top_n: Annotated[int, integer(1, None, MAX_COUNT)] | None = None
    return_documents: Annotated[bool, boolean()] | None = None  # None: true, as Jina's
    # Qwen3-Reranker's <Instruct> line (its default: retrieve passages for a web search query).
    instruction: Annotated[str, text()] | None = None
    # Cohere's: each document cut to this many tokens (else one too long is a 400).
    max_tokens_per_doc: Annotated[int, integer(1, None, MAX_COUNT)] | None = None
