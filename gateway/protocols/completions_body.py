"""The body of OpenAI's legacy /v1/completions: prompts as text or token ids, and its fields."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import PlainValidator

from common.validation import MAX_COUNT, check_text, integer, invalid, json_type
from gateway.protocols.bodies import Required, Unsupported, is_null
from gateway.protocols.openai_fields import Bool, OpenAISampling, PositiveCount, token_ids

MAX_LOGPROBS = 5  # OpenAI's limit for the integer `logprobs`


def prompt_list(value: Any) -> list[str | list[int]]:
    """A string, an array of strings, an array of token ids, or an array of arrays of token
    ids; each string or id array is one prompt."""
    if isinstance(value, str):
        return [check_text(value, non_empty=True)]
    if not isinstance(value, list):
        expected = "a string, an array of strings or an array of token ids"
        raise invalid(f"must be {expected}, got {json_type(value)}")
    if not value:
        raise invalid("must not be empty")
    if not any(isinstance(item, (str, list)) for item in value):
        return [token_ids(value)]  # one prompt as token ids
    prompts: list[str | list[int]] = []
    for i, item in enumerate(value):
        if isinstance(item, list):
            prompts.append(token_ids(item, str(i)))
        elif not isinstance(item, str):
            reason = f"must be a string or an array of token ids, got {json_type(item)}"
            raise invalid(reason, str(i))
        elif not item:
            raise invalid("must not be empty", str(i))
        else:
            prompts.append(check_text(item, at=str(i)))
    return prompts


class CompletionsBody(OpenAISampling):
    """POST /v1/completions."""

    unsupported: ClassVar[Unsupported] = {"suffix": is_null}  # OpenAI's insert mode

    prompt: Annotated[list[str | list[int]], PlainValidator(prompt_list), Required]
    max_tokens: PositiveCount | None = None
    logprobs: Annotated[int, integer(0, MAX_LOGPROBS)] | None = None
    echo: Bool | None = None
    best_of: Annotated[int, integer(1, None, MAX_COUNT)] | None = None
