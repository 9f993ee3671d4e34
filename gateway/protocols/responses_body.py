"""The body of OpenAI's POST /v1/responses: input items, tools, text format and settings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, PlainValidator, ValidationError, model_validator

from common.chat import PART_SEPARATOR
from common.sampling_fields import MAX_TOP_LOGPROBS
from common.validation import (
    check_text,
    describe,
    integer,
    invalid,
    json_object,
    json_type,
    number,
    show,
    text,
)
from gateway.protocols.bodies import MAX_TOOLS, RequestBody, Unsupported, is_null
from gateway.protocols.openai_fields import Bool, PositiveCount
from gateway.protocols.reasoning_item_body import ReasoningItem

Text = Annotated[str, text()]
Name = Annotated[str, text(non_empty=True)]
JsonObject = Annotated[dict[str, Any], json_object()]
MAX_INPUT_ITEMS = 4096
MAX_METADATA_KEYS = 16  # OpenAI's limits on `metadata`: 16 keys of 64, values of 512 characters
TOOL_TYPE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")  # a tool type, safe in a response header
# The text parts each role may send; `refusal` parts carry their text in `refusal`.
TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
INCLUDABLE = (
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "code_interpreter_call.outputs",
)


def _text_parts(value: Any) -> str:
    """A string, or text parts (input_text, output_text, refusal) joined by newlines."""
    if isinstance(value, str):
        return check_text(value)
    if not isinstance(value, list):
        raise invalid(f"must be a string or an array of content parts, got {json_type(value)}")
    texts = []
    for i, part in enumerate(value):
        if not isinstance(part, Mapping):
            raise invalid(f"must be an object, got {json_type(part)}", str(i))
        kind = part.get("type")
        if kind not in TEXT_PARTS:
            reason = f"must be a text part (only text is supported), got {show(kind)}"
            raise invalid(reason, f"{i}.type")
        key = "refusal" if kind == "refusal" else "text"
        texts.append(check_text(part.get(key), at=f"{i}.{key}"))
    return PART_SEPARATOR.join(texts)


TextParts = Annotated[str, PlainValidator(_text_parts)]


class InputItem(BaseModel):
    """One input item; which fields it needs depends on its type (checked below). A message
    may leave out `type` (the SDK's "easy" messages); other keys (`id`, `status`) are ignored.
    A reasoning item is its thoughts' text, in `content` (reasoning_item_body.py)."""

    type: Literal["message", "function_call", "function_call_output", "reasoning"] = "message"
    role: Literal["system", "developer", "user", "assistant"] | None = None
    content: TextParts | None = None  # message, reasoning
    call_id: Text | None = None  # function_call, function_call_output
    name: Name | None = None  # function_call
    arguments: Text | None = None  # function_call: JSON text
    output: TextParts | None = None  # function_call_output

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> InputItem:
        needed = {
            "message": ("role", "content"),
            "function_call": ("call_id", "name", "arguments"),
            "function_call_output": ("call_id", "output"),
        }
        for field in needed.get(self.type, ()):
            if getattr(self, field) is None:
                raise invalid(f"is required in a {self.type} item", field)
        return self


def _input(value: Any) -> list[InputItem]:
    """A string (one user message) or an array of input items."""
    if isinstance(value, str):
        return [InputItem(role="user", content=check_text(value))]
    if not isinstance(value, list):
        raise invalid(f"must be a string or an array of input items, got {json_type(value)}")
    if len(value) > MAX_INPUT_ITEMS:
        raise invalid(f"may hold at most {MAX_INPUT_ITEMS} items, got {len(value)}")
    return [_item(item, i) for i, item in enumerate(value)]


def _item(value: Any, i: int) -> InputItem:
    """Item `i`, its errors named from `input` down (input.3.content.0.type)."""
    if not isinstance(value, Mapping):
        raise invalid(f"must be an object, got {json_type(value)}", str(i))
    kind = value.get("type", "message")
    if kind not in ("message", "function_call", "function_call_output", "reasoning"):
        raise invalid(f"{show(kind)} is not supported by this server", f"{i}.type")
    try:
        if kind == "reasoning":
            thoughts = ReasoningItem.model_validate(value).thoughts
            return InputItem(type="reasoning", content=thoughts)
        return InputItem.model_validate(value)
    except ValidationError as exc:
        param, message = describe(exc)
        if param is None:
            raise invalid(message, str(i)) from None
        raise invalid(message.removeprefix(f"{param} "), f"{i}.{param}") from None


class Tool(BaseModel):
    """A function tool; any other type is a hosted tool this server cannot run (ignored)."""

    type: Name
    name: Name | None = None
    description: Text | None = None
    parameters: JsonObject | None = None
    strict: Bool | None = None

    @model_validator(mode="after")
    def _a_known_shape(self) -> Tool:
        if not TOOL_TYPE.fullmatch(self.type):
            raise invalid(f"must be a tool type like web_search, got {show(self.type)}", "type")
        if self.type == "function" and self.name is None:
            raise invalid("is required in a function tool", "name")
        return self


@dataclass(frozen=True)
class AllowedTools:
    """tool_choice {"type": "allowed_tools", "mode", "tools"}: only these functions, under
    `mode` ("auto" or "required"); the hosted tools it lists are ignored like the others."""

    mode: str
    names: tuple[str, ...]


def _allowed_tools(value: Mapping[str, Any]) -> AllowedTools:
    mode = value.get("mode")
    if mode not in ("auto", "required"):
        raise invalid(f'must be "auto" or "required", got {show(mode)}', "mode")
    tools = value.get("tools")
    if not isinstance(tools, list) or not tools or len(tools) > MAX_TOOLS:
        raise invalid(f"must be an array of 1 to {MAX_TOOLS} tools", "tools")
    names = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise invalid(f"must be an object, got {json_type(tool)}", f"tools.{i}")
        if tool.get("type") == "function":
            names.append(check_text(tool.get("name"), non_empty=True, at=f"tools.{i}.name"))
    return AllowedTools(mode, tuple(names))


def _tool_choice(value: Any) -> str | dict[str, str] | AllowedTools | None:
    """ "none" | "auto" | "required" | {"type": "function", "name": …}, as the worker's
    "none" | "auto" | "required" | {"name": …}; or an allowed-tools subset. Forcing a hosted
    tool cannot be served."""
    if value is None or value in ("none", "auto", "required"):
        return value  # type: ignore[no-any-return]
    if isinstance(value, Mapping) and value.get("type") == "function":
        return {"name": check_text(value.get("name"), non_empty=True, at="name")}
    if isinstance(value, Mapping) and value.get("type") == "allowed_tools":
        return _allowed_tools(value)
    if isinstance(value, Mapping) and isinstance(value.get("type"), str):
        raise invalid(f"{show(value['type'])} is not supported by this server", "type")
    raise invalid(
        'must be "none", "auto", "required" or {"type": "function", "name": …}, '
        f"got {show(value)}"
    )


class TextFormat(BaseModel):
    """`text.format`: text, json_object, or json_schema {name, schema, strict, description}."""

    type: Literal["text", "json_object", "json_schema"]
    name: Name | None = None
    schema_: Annotated[JsonObject | None, Field(alias="schema")] = None
    strict: Bool | None = None
    description: Text | None = None

    @model_validator(mode="after")
    def _named_schema(self) -> TextFormat:
        if self.type == "json_schema" and self.name is None:
            raise invalid("is required in a json_schema format", "name")
        return self

    def response_format(self) -> dict[str, Any]:
        """The same request in Chat Completions' `response_format` shape."""
        if self.type != "json_schema":
            return {"type": self.type}
        spec = {"name": self.name, "schema": self.schema_ or {}, "strict": self.strict}
        return {"type": "json_schema", "json_schema": spec}


class TextConfig(BaseModel):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # accepted; nothing changes


class Reasoning(BaseModel):
    """Accepted and echoed; a model that does not reason has nothing to say here."""

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


def _metadata(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise invalid(f"must be an object, got {json_type(value)}")
    if len(value) > MAX_METADATA_KEYS:
        raise invalid(f"may hold at most {MAX_METADATA_KEYS} keys, got {len(value)}")
    for key, item in value.items():
        check_text(key, at="", max_chars=64)
        check_text(item, at=key, max_chars=512)
    return value


def _include(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise invalid(f"must be an array of strings, got {json_type(value)}")
    for i, item in enumerate(value):
        if item not in INCLUDABLE:
            raise invalid(f"must be one of {', '.join(INCLUDABLE)}, got {show(item)}", str(i))
    return value


class ResponsesBody(RequestBody):
    """POST /v1/responses. Sampling beyond temperature and top_p is not part of this API."""

    unsupported: ClassVar[Unsupported] = {
        "background": lambda value: value in (None, False),
        "conversation": is_null,
        "prompt": is_null,
        "max_tool_calls": is_null,
        "context_management": lambda value: value in (None, []),
        "moderation": is_null,
    }

    model: Text | None = None
    input: Annotated[list[InputItem], PlainValidator(_input)] | None = None
    instructions: Text | None = None
    previous_response_id: Name | None = None
    store: Bool | None = None
    stream: Bool | None = None
    max_output_tokens: PositiveCount | None = None
    temperature: Annotated[float, number(0, 2)] | None = None
    top_p: Annotated[float, number(0, 1, low_open=True)] | None = None
    top_logprobs: Annotated[int, integer(0, MAX_TOP_LOGPROBS)] | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Annotated[Any, PlainValidator(_tool_choice)] = None
    parallel_tool_calls: Bool | None = None
    text: TextConfig | None = None
    reasoning: Reasoning | None = None
    include: Annotated[list[str], PlainValidator(_include)] | None = None
    metadata: Annotated[dict[str, str], PlainValidator(_metadata)] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    prompt_cache_key: Text | None = None  # routing already follows the prompt's prefix
    user: Text | None = None
    safety_identifier: Text | None = None
    service_tier: Text | None = None

    @model_validator(mode="after")
    def _something_to_answer(self) -> ResponsesBody:
        if not self.input and self.previous_response_id is None:
            raise invalid("is required (a string or a non-empty array of items)", "input")
        return self
