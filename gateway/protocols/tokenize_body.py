"""The bodies of vLLM's /tokenize (a raw prompt; a chat body goes through the chat route's
model) and /detokenize."""

from __future__ import annotations

from typing import Annotated

from pydantic import PlainValidator

from common.validation import text
from gateway.protocols.bodies import RequestBody, Required
from gateway.protocols.openai_fields import token_ids


class TokenizeBody(RequestBody):
    model: Annotated[str, text()] | None = None
    prompt: Annotated[str, text(non_empty=True), Required]


class DetokenizeBody(RequestBody):
    model: Annotated[str, text()] | None = None
    tokens: Annotated[list[int], PlainValidator(lambda value: token_ids(value)), Required]
