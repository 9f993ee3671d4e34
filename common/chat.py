"""Chat messages in no protocol's shape: what the gateway sends and the engine API takes.

Both sides read them with these models, so a chat gives the same prompt either way: content
is a string or text parts joined by "\\n", roles are system, user, assistant and tool, an
assistant turn may carry tool calls (its content may then be null) and its earlier
reasoning (`reasoning_content`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, model_validator

from common.errors import RequestError
from common.validation import (
    check_json_object,
    check_text,
    describe,
    invalid,
    json_type,
    show,
    text,
)

PART_SEPARATOR = "\n"  # text parts of one message, as vLLM joins them


def check_text_content(value: Any) -> str:
    """A string, or an array of `{"type": "text", "text": str}` parts joined by newlines."""
    if isinstance(value, str):
        return check_text(value)
    if not isinstance(value, list):
        raise invalid(f"must be a string or an array of text parts, got {json_type(value)}")
    texts = []
    for i, part in enumerate(value):
        if not isinstance(part, Mapping):
            raise invalid(f"must be an object, got {json_type(part)}", str(i))
        kind = part.get("type")
        if kind != "text":
            reason = f'must be "text" (only text is supported), got {show(kind)}'
            raise invalid(reason, f"{i}.type")
        texts.append(check_text(part.get("text"), at=f"{i}.text"))
    return PART_SEPARATOR.join(texts)


def _arguments(value: Any) -> str | dict[str, Any]:
    """A tool call's arguments: JSON text, or (in-process callers) the object itself."""
    if isinstance(value, str):
        return check_text(value)
    if isinstance(value, dict):
        return check_json_object(value)
    raise invalid(f"must be a JSON string or an object, got {json_type(value)}")


TextContent = Annotated[str, PlainValidator(check_text_content)]


class ToolCall(BaseModel):
    """One call an assistant turn made; `arguments` is JSON text (or its object)."""

    model_config = ConfigDict(frozen=True)

    id: Annotated[str, text()] = ""
    name: Annotated[str, text(non_empty=True)]
    arguments: Annotated[str | dict[str, Any], PlainValidator(_arguments)] = "{}"


class ChatMessage(BaseModel):
    """One turn; other keys (`name`, `cache_control`) are ignored."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: TextContent | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: Annotated[str, text()] | None = None
    # An assistant turn's earlier reasoning, for templates that render it (Qwen3's).
    reasoning_content: Annotated[str, text()] | None = None

    @model_validator(mode="after")
    def _content_or_calls(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise invalid("must be a string or an array of text parts, got null", "content")
        return self

    def neutral(self) -> dict[str, Any]:
        """The dict the tokenizer's templates read: content always a string."""
        entry: dict[str, Any] = {"role": self.role, "content": self.content or ""}
        if self.role == "assistant" and self.tool_calls:
            entry["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        if self.role == "tool" and self.tool_call_id is not None:
            entry["tool_call_id"] = self.tool_call_id
        if self.role == "assistant" and self.reasoning_content:
            entry["reasoning_content"] = self.reasoning_content
        return entry


class _Chat(BaseModel):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Validated neutral messages; a RequestError names the bad one by path (messages.0.role)."""
    try:
        chat = _Chat.model_validate({"messages": list(messages)})
    except ValidationError as exc:
        param, message = describe(exc)
        raise RequestError(message, param) from None
    return [message.neutral() for message in chat.messages]
