"""The body of OpenAI's /v1/chat/completions: messages, tools and the chat route's own fields."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, PlainValidator, model_validator

from common.chat import TextContent
from common.sampling_fields import MAX_TOP_LOGPROBS, template_kwargs
from common.validation import check_text, integer, invalid, json_object, show, text
from gateway.protocols.bodies import MAX_TOOLS, Required, Unsupported, is_null
from gateway.protocols.openai_fields import Bool, OpenAISampling, PositiveCount

Text = Annotated[str, text()]
Name = Annotated[str, text(non_empty=True)]
JsonObject = Annotated[dict[str, Any], json_object()]


class FunctionCall(BaseModel):
    name: Text
    arguments: Text = "{}"  # JSON text, as the API sends it


class ToolCall(BaseModel):
    """An assistant turn's earlier call."""

    id: Text | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(BaseModel):
    """One turn; `developer` is the newer name of `system`. Other keys (`name`) are ignored."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: TextContent | None = None
    tool_calls: list[ToolCall] | None = None  # assistant turns
    tool_call_id: Text | None = None  # tool turns
    # An assistant turn's earlier reasoning, under vLLM's older name or the newer one.
    reasoning_content: Text | None = None
    reasoning: Text | None = None

    @model_validator(mode="after")
    def _complete(self) -> Message:
        if self.role == "tool" and self.tool_call_id is None:
            raise invalid("is required in a tool message", "tool_call_id")
        calls = self.role == "assistant" and self.tool_calls
        if self.content is None and not calls:
            raise invalid("must be a string or an array of text parts, got null", "content")
        return self


class Function(BaseModel):
    name: Name
    description: Text | None = None
    parameters: JsonObject | None = None
    strict: Bool | None = None


class Tool(BaseModel):
    type: Literal["function"]
    function: Function


def _tool_choice(value: Any) -> str | dict[str, str] | None:
    """ "none" | "auto" | "required" | {"type": "function", "function": {"name": …}}, as the
    worker's "none" | "auto" | "required" | {"name": …}."""
    if value is None:
        return None
    if value in ("none", "auto", "required"):
        return str(value)
    if isinstance(value, dict) and value.get("type") == "function":
        function = value.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return {"name": check_text(function["name"], at="function.name")}
    raise invalid(
        'must be "none", "auto", "required" or '
        f'{{"type": "function", "function": {{"name": …}}}}, got {show(value)}'
    )


class ChatBody(OpenAISampling):
    """POST /v1/chat/completions."""

    unsupported: ClassVar[Unsupported] = {
        "audio": is_null,
        "modalities": lambda value: value is None or value == ["text"],
        "prediction": is_null,
        "web_search_options": is_null,
        "functions": is_null,  # the deprecated form of tools
        "function_call": is_null,
        "reasoning_effort": is_null,
        "store": lambda value: value in (None, False),
    }

    messages: Annotated[list[Message], Field(min_length=1), Required]
    max_tokens: PositiveCount | None = None
    max_completion_tokens: PositiveCount | None = None  # the newer name; it wins
    logprobs: Bool | None = None
    top_logprobs: Annotated[int, integer(0, MAX_TOP_LOGPROBS)] | None = None
    response_format: JsonObject | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Annotated[Any, PlainValidator(_tool_choice)] = None
    parallel_tool_calls: Bool | None = None
    # vLLM's: the template's own variables, by the engine's rule (no reserved names).
    chat_template_kwargs: Annotated[dict[str, Any], PlainValidator(template_kwargs)] | None = None

    @model_validator(mode="after")
    def _logprobs_asked(self) -> ChatBody:
        if self.top_logprobs is not None and not self.logprobs:
            raise invalid("requires logprobs to be true", "top_logprobs")
        return self
