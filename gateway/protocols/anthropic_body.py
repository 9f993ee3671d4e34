"""The body of Anthropic's /v1/messages (and count_tokens): content blocks, tools, sampling."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, BeforeValidator, Field, PlainValidator, model_validator

from common.chat import PART_SEPARATOR, TextContent
from common.sampling_fields import MAX_STOP_CHARS, MAX_STOPS
from common.validation import (
    MAX_COUNT,
    boolean,
    check_text,
    integer,
    invalid,
    json_object,
    json_type,
    number,
    show,
    text,
)
from gateway.protocols.anthropic_settings import ContextManagement, OutputConfig, Thinking
from gateway.protocols.bodies import (
    MAX_TOOLS,
    RequestBody,
    Required,
    Unsupported,
    is_null,
    string_list,
)

Text = Annotated[str, text()]
Bool = Annotated[bool, boolean()]
JsonObject = Annotated[dict[str, Any], json_object()]
MAX_EXAMPLES = 16  # input_examples of one tool
# Which content blocks each role's turns may hold; a system turn inside `messages` (Claude
# Code sends them) is text, rendered where it stands.
BLOCKS = {
    "user": ("text", "tool_result"),
    "assistant": ("text", "tool_use", "thinking", "redacted_thinking"),
    "system": ("text",),
}


class ResultContent(NamedTuple):
    """A tool_result's content: its text parts joined, and the deferred tools its
    `tool_reference` parts load (what a client's tool search found)."""

    text: str
    tool_references: tuple[tuple[int, str], ...] = ()  # (part index, tool name)


def _result_content(value: Any) -> ResultContent:
    """A string, or an array of text and `{"type": "tool_reference", "tool_name"}` parts."""
    if isinstance(value, str):
        return ResultContent(check_text(value))
    if not isinstance(value, list):
        reason = f"must be a string or an array of content blocks, got {json_type(value)}"
        raise invalid(reason)
    texts: list[str] = []
    references: list[tuple[int, str]] = []
    for i, part in enumerate(value):
        if not isinstance(part, dict):
            raise invalid(f"must be an object, got {json_type(part)}", str(i))
        kind = part.get("type")
        if kind == "text":
            texts.append(check_text(part.get("text"), at=f"{i}.text"))
        elif kind == "tool_reference":
            name = check_text(part.get("tool_name"), non_empty=True, at=f"{i}.tool_name")
            references.append((i, name))
        else:
            reason = f'must be "text" or "tool_reference", got {show(kind)}'
            raise invalid(reason, f"{i}.type")
    return ResultContent(PART_SEPARATOR.join(texts), tuple(references))


class Block(BaseModel):
    """One content block; which fields it needs depends on its type (checked below), and
    other keys (`cache_control`, `citations`) are ignored."""

    type: Text
    text: Text | None = None
    id: Text | None = None  # tool_use
    name: Text | None = None  # tool_use
    input: JsonObject | None = None  # tool_use
    tool_use_id: Text | None = None  # tool_result
    content: Annotated[ResultContent, PlainValidator(_result_content)] | None = None  # tool_result
    is_error: Bool | None = None  # tool_result
    thinking: Text | None = None  # thinking
    signature: Text | None = None  # thinking: opaque, not checked here
    data: Text | None = None  # redacted_thinking

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> Block:
        needed = {
            "text": ("text",),
            "tool_use": ("name",),
            "tool_result": ("tool_use_id",),
            "thinking": ("thinking",),
            "redacted_thinking": ("data",),
        }
        for field in needed.get(self.type, ()):
            if getattr(self, field) is None:
                raise invalid(f"is required in a {self.type} block", field)
        return self


def _blocks(value: Any) -> Any:
    """A string is one text block."""
    if isinstance(value, str):
        return [{"type": "text", "text": check_text(value)}]
    if not isinstance(value, list):
        reason = f"must be a string or an array of content blocks, got {json_type(value)}"
        raise invalid(reason)
    return value


class Message(BaseModel):
    role: Literal["user", "assistant", "system"]
    content: Annotated[list[Block], BeforeValidator(_blocks)]

    @model_validator(mode="after")
    def _blocks_of_its_role(self) -> Message:
        for k, block in enumerate(self.content):
            if block.type not in BLOCKS[self.role]:
                reason = f"{show(block.type)} is not supported in a {self.role} turn"
                raise invalid(reason, f"content.{k}.type")
        return self


class Tool(BaseModel):
    """A client tool; server tools (`bash_…`, `web_search_…`) are refused by their type.
    `cache_control` is ignored: prefix caching needs no marks."""

    type: Text | None = None
    name: Annotated[str, text(non_empty=True)]
    description: Text | None = None
    input_schema: JsonObject | None = None
    strict: Bool | None = None
    defer_loading: Bool | None = None  # left out of what the model sees (tools.py)
    input_examples: Annotated[list[JsonObject], Field(max_length=MAX_EXAMPLES)] | None = None

    @model_validator(mode="after")
    def _a_client_tool(self) -> Tool:
        if self.type not in (None, "custom"):
            raise invalid(f"{show(self.type)} is not supported by this server", "type")
        if self.input_schema is None:
            raise invalid("is required", "input_schema")
        return self


class ToolChoice(BaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: Text | None = None
    disable_parallel_tool_use: Bool | None = None


class MessagesBody(RequestBody):
    """POST /v1/messages."""

    unsupported: ClassVar[Unsupported] = {
        "container": is_null,
        "mcp_servers": lambda value: value in (None, []),
    }

    model: Annotated[str, text(non_empty=True), Required]
    max_tokens: Annotated[int, integer(1, None, MAX_COUNT), Required]
    messages: Annotated[list[Message], Field(min_length=1), Required]
    system: TextContent | None = None
    temperature: Annotated[float, number(0, 1)] | None = None
    top_p: Annotated[float, number(0, 1, low_open=True)] | None = None
    top_k: Annotated[int, integer(0, None, MAX_COUNT)] | None = None
    stop_sequences: (
        Annotated[list[str], PlainValidator(string_list(MAX_STOPS, MAX_STOP_CHARS))] | None
    ) = None
    stream: Bool | None = None
    metadata: JsonObject | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = None
    output_config: OutputConfig | None = None
    thinking: Thinking | None = None
    context_management: ContextManagement | None = None
