"""Tools in every protocol: definitions, tool choice and tool turns, in the worker's terms.

The worker takes tools as [{name, description, parameters, strict}], tool_choice as "auto",
"none", "required" or {"name": …}, and chat turns as {role, content} where an assistant turn
may carry tool_calls [{id, name, arguments (JSON text)}] and a `tool` turn a tool_call_id.
The bodies' models have checked every type; what is left here are the rules across fields.
"""

from __future__ import annotations

import json
from typing import Any

from common.chat import PART_SEPARATOR
from common.structured_output import StructuredOutputError
from common.tool_calls import tool_call_grammar
from common.validation import show
from gateway.errors import GatewayError
from gateway.protocols import anthropic_body, chat_body, responses_body
from gateway.protocols.anthropic_context import THINKING_BLOCKS, num_thinking_turns
from gateway.protocols.bodies import NO_TOOLS, ToolSettings


def openai_tools(body: chat_body.ChatBody) -> ToolSettings:
    """`tools`, `tool_choice`, `parallel_tool_calls` in the worker's terms."""
    tools = [
        _tool(
            at=f"tools.{i}.function",
            schema_key="parameters",
            name=tool.function.name,
            schema=tool.function.parameters or {"type": "object"},
            strict=tool.function.strict,
            description=tool.function.description,
        )
        for i, tool in enumerate(body.tools or [])
    ]
    parallel = body.parallel_tool_calls
    return _settings(tools, body.tool_choice, True if parallel is None else parallel)


def anthropic_tools(body: anthropic_body.MessagesBody) -> ToolSettings:
    """`tools` and `tool_choice` ({type: auto|any|tool|none, name, disable_parallel_tool_use}).

    A tool with `defer_loading` is not loaded into the model's context until a
    `tool_reference` in a tool_result (what a client's tool search returns) loads it: until
    then it is neither shown to the model nor callable. `input_examples` are shown after the
    description, one JSON object a line.
    """
    loaded = _loaded_tools(body)
    tools = [
        _tool(
            at=f"tools.{i}",
            schema_key="input_schema",
            name=tool.name,
            schema=tool.input_schema or {},
            strict=tool.strict,
            description=_with_examples(tool.description, tool.input_examples),
        )
        for i, tool in enumerate(body.tools or [])
        if not tool.defer_loading or tool.name in loaded
    ]
    value = body.tool_choice
    choice: Any = None
    parallel = True
    if value is not None:
        choice = {"any": "required", "tool": {"name": value.name}}.get(value.type, value.type)
        parallel = not value.disable_parallel_tool_use
    return _settings(tools, choice, parallel)


def responses_tools(body: responses_body.ResponsesBody) -> tuple[ToolSettings, list[str]]:
    """(the worker's tool settings, the hosted tool types ignored). Function tools are
    served as chat's; hosted ones (web_search, file_search, namespace, mcp, …) cannot run
    here, and are left out rather than refused, so that clients which always send them work."""
    tools: list[dict[str, Any]] = []
    ignored: list[str] = []
    choice = body.tool_choice
    allowed = choice if isinstance(choice, responses_body.AllowedTools) else None
    if allowed is not None:
        choice = allowed.mode
        given = {tool.name for tool in body.tools or [] if tool.type == "function"}
        for name in allowed.names:
            if name not in given:
                message = f"tool_choice names no given tool: {show(name)}"
                raise GatewayError.invalid(message, "tool_choice")
    for i, tool in enumerate(body.tools or []):
        if tool.type != "function":
            if tool.type not in ignored:
                ignored.append(tool.type)
            continue
        assert tool.name is not None  # the body's model requires it of a function
        if any(t["name"] == tool.name for t in tools):  # named by its own index
            raise GatewayError.invalid(
                f"tools.{i}: a second tool named {tool.name!r}", f"tools.{i}"
            )
        if allowed is not None and tool.name not in allowed.names:
            continue
        tools.append(
            _tool(
                at=f"tools.{i}",
                schema_key="parameters",
                name=tool.name,
                schema=tool.parameters or {"type": "object"},
                strict=tool.strict,
                description=tool.description,
            )
        )
    parallel = body.parallel_tool_calls
    return _settings(tools, choice, True if parallel is None else parallel), ignored


def openai_messages(messages: list[chat_body.Message]) -> list[dict[str, Any]]:
    """Neutral turns: `developer` is `system`; assistant tool_calls, reasoning (either
    name; `reasoning_content` first) and `tool` turns kept."""
    neutral = []
    for message in messages:
        entry: dict[str, Any] = {
            "role": "system" if message.role == "developer" else message.role,
            "content": message.content or "",
        }
        if message.role == "assistant" and message.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": call.id or "",
                    "name": call.function.name,
                    "arguments": call.function.arguments,
                }
                for call in message.tool_calls
            ]
        if message.role == "tool":
            entry["tool_call_id"] = message.tool_call_id
        reasoning = message.reasoning_content or message.reasoning
        if message.role == "assistant" and reasoning:
            entry["reasoning_content"] = reasoning
        neutral.append(entry)
    return neutral


def _loaded_tools(body: anthropic_body.MessagesBody) -> set[str]:
    """The tools the messages' `tool_reference` parts load; one naming no given tool is a
    400 naming where it stands."""
    names = {tool.name for tool in body.tools or []}
    loaded = set()
    for m, message in enumerate(body.messages):
        for b, block in enumerate(message.content):
            for k, name in block.content.tool_references if block.content else ():
                if name not in names:
                    param = f"messages.{m}.content.{b}.content.{k}.tool_name"
                    message_text = f"{param} names no given tool: {show(name)}"
                    raise GatewayError.invalid(message_text, param)
                loaded.add(name)
    return loaded


def _with_examples(description: str | None, examples: list[dict[str, Any]] | None) -> str | None:
    if not examples:
        return description
    lines = "\n".join(json.dumps(example) for example in examples)
    return f"{description or ''}\n\nInput examples:\n{lines}".lstrip("\n")


def anthropic_messages(
    messages: list[anthropic_body.Message], thinking_kept: int | None = None
) -> list[dict[str, Any]]:
    """Neutral turns: tool_use blocks become an assistant turn's tool_calls, and each
    tool_result block a `tool` turn, in order; a system turn stays where it stands.
    `thinking` blocks are the turn's reasoning_content, in the latest `thinking_kept` turns
    that hold thinking (None: all; context edits cleared the rest); `redacted_thinking` is
    left out (its data is encrypted by another model's provider)."""
    neutral: list[dict[str, Any]] = []
    thinking_turns = num_thinking_turns(messages)
    skipped = 0 if thinking_kept is None else max(0, thinking_turns - thinking_kept)
    for message in messages:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        thoughts = [block.thinking or "" for block in message.content if block.type == "thinking"]
        if skipped and any(block.type in THINKING_BLOCKS for block in message.content):
            thoughts, skipped = [], skipped - 1
        for block in message.content:
            if block.type == "text":
                texts.append(block.text or "")
            elif block.type == "tool_use":
                arguments = json.dumps(block.input or {})
                calls.append({"id": block.id or "", "name": block.name, "arguments": arguments})
            elif block.type in ("thinking", "redacted_thinking"):
                continue
            else:  # tool_result, in a user turn
                if texts:
                    neutral.append({"role": "user", "content": PART_SEPARATOR.join(texts)})
                    texts = []
                neutral.append(_tool_result(block))
        content = PART_SEPARATOR.join(texts)
        turn: dict[str, Any] = {"role": message.role, "content": content}
        if thoughts:
            turn["reasoning_content"] = PART_SEPARATOR.join(thoughts)
        if calls:
            neutral.append({**turn, "tool_calls": calls})
        elif texts or thoughts or not neutral or neutral[-1]["role"] != "tool":
            neutral.append(turn)
    return neutral


def _tool_result(block: anthropic_body.Block) -> dict[str, Any]:
    text = block.content.text if block.content is not None else ""
    if block.is_error:
        text = f"Error: {text}"
    return {"role": "tool", "content": text, "tool_call_id": block.tool_use_id}


def _settings(tools: list[dict[str, Any]], choice: Any, parallel: bool) -> ToolSettings:
    names = [tool["name"] for tool in tools]
    for i, name in enumerate(names):
        if names.index(name) != i:
            raise GatewayError.invalid(f"tools.{i}: a second tool named {name!r}", f"tools.{i}")
    if not tools:
        if isinstance(choice, dict) or choice == "required":
            raise GatewayError.invalid(
                "tool_choice asks for a tool call, but no tools are given", "tool_choice"
            )
        return NO_TOOLS
    choice = choice or "auto"
    if isinstance(choice, dict) and choice.get("name") not in names:
        message = f"tool_choice names no given tool: {show(choice.get('name'))}"
        raise GatewayError.invalid(message, "tool_choice")
    if choice != "none":
        try:  # any schema the grammar engine cannot use is refused here, before any work
            tool_call_grammar(tools, choice, parallel)
        except StructuredOutputError as exc:
            raise GatewayError.invalid(f"tools: {exc}", "tools") from None
    return ToolSettings(tuple(tools), choice, parallel)


def _tool(
    *,
    at: str,
    schema_key: str,
    name: str,
    schema: dict[str, Any],
    strict: bool | None,
    description: str | None,
) -> dict[str, Any]:
    """The worker's definition of one tool; a schema the grammar engine cannot compile is a
    400 naming it (`tools.0.function.parameters`)."""
    try:
        tool_call_grammar(
            [{"name": name, "parameters": schema, "strict": strict}], "required", False
        )
    except StructuredOutputError as exc:
        param = f"{at}.{schema_key}"
        raise GatewayError.invalid(f"{param}: {exc}", param) from None
    tool: dict[str, Any] = {"name": name, "parameters": schema, "strict": strict}
    if description:
        tool["description"] = description
    return tool
