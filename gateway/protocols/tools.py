"""Tools in both protocols: definitions, tool choice and tool turns, in the worker's terms.

The worker takes tools as [{name, description, parameters, strict}], tool_choice as "auto",
"none", "required" or {"name": …}, and chat turns as {role, content} where an assistant turn
may carry tool_calls [{id, name, arguments (JSON text)}] and a `tool` turn a tool_call_id.
"""

from __future__ import annotations

import json
from typing import Any

from common.structured_output import StructuredOutputError
from common.tool_calls import tool_call_grammar
from gateway.errors import GatewayError
from gateway.protocols.validate import get_bool, json_type, missing, show, text_content

MAX_TOOLS = 128


def openai_tools(body: dict[str, Any]) -> dict[str, Any]:
    """`tools`, `tool_choice`, `parallel_tool_calls` as the worker's sampling keywords."""
    value = body.get("tools")
    tools = []
    for i, tool in enumerate(_tool_list(value, "tools")):
        at = f"tools.{i}"
        if tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise GatewayError.invalid(f'{at} must be {{"type": "function", "function": …}}', at)
        function = tool["function"]
        strict = get_bool(function, "strict", param=f"{at}.function.strict")
        tools.append(_tool(function, "parameters", f"{at}.function", strict))
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        function = choice.get("function")
        if choice.get("type") != "function" or not isinstance(function, dict):
            raise GatewayError.invalid(
                'tool_choice must be "none", "auto", "required" or '
                '{"type": "function", "function": {"name": …}}',
                "tool_choice",
            )
        choice = {"name": function.get("name")}
    elif choice is not None and choice not in ("none", "auto", "required"):
        message = (
            f'tool_choice must be "none", "auto", "required" or a function, got {show(choice)}'
        )
        raise GatewayError.invalid(message, "tool_choice")
    parallel = get_bool(body, "parallel_tool_calls")
    return _settings(tools, choice, True if parallel is None else parallel)


def anthropic_tools(body: dict[str, Any]) -> dict[str, Any]:
    """`tools` and `tool_choice` ({type: auto|any|tool|none, name, disable_parallel_tool_use})."""
    tools = []
    for i, tool in enumerate(_tool_list(body.get("tools"), "tools")):
        if tool.get("type") not in (None, "custom"):
            message = f"tools.{i}.type {show(tool.get('type'))} is not supported by this server"
            raise GatewayError.invalid(message, f"tools.{i}.type")
        strict = get_bool(tool, "strict", param=f"tools.{i}.strict")
        tools.append(_tool(tool, "input_schema", f"tools.{i}", strict))
    value = body.get("tool_choice")
    choice: Any = None
    parallel = True
    if value is not None:
        if not isinstance(value, dict) or value.get("type") not in ("auto", "any", "tool", "none"):
            message = 'tool_choice must be {"type": "auto" | "any" | "tool" | "none"}'
            raise GatewayError.invalid(message, "tool_choice")
        kind = value["type"]
        choice = {"any": "required", "tool": {"name": value.get("name")}}.get(kind, kind)
        disable = get_bool(value, "disable_parallel_tool_use", param="tool_choice")
        parallel = not disable
    return _settings(tools, choice, parallel)


def openai_messages(value: Any) -> list[dict[str, Any]]:
    """`messages` with assistant tool_calls (content may then be null) and `tool` turns."""
    roles = ("system", "developer", "user", "assistant", "tool")
    messages = []
    for i, message in enumerate(_message_list(value)):
        at = f"messages[{i}]"
        role = message.get("role")
        if role not in roles:
            allowed = ", ".join(f'"{r}"' for r in roles)
            raise GatewayError.invalid(
                f"{at}.role must be one of {allowed}, got {show(role)}", "messages"
            )
        content = message.get("content")
        entry: dict[str, Any] = {"role": "system" if role == "developer" else role}
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls:
            entry["tool_calls"] = [
                _openai_call(call, f"{at}.tool_calls[{k}]")
                for k, call in enumerate(_list(calls, f"{at}.tool_calls"))
            ]
        entry["content"] = (
            "" if content is None and calls else text_content(content, f"{at}.content", "messages")
        )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise GatewayError.invalid(f"{at}.tool_call_id must be a string", "messages")
            entry["tool_call_id"] = call_id
        messages.append(entry)
    return messages


def anthropic_messages(value: Any) -> list[dict[str, Any]]:
    """`messages` whose content may hold tool_use blocks (assistant) and tool_result blocks
    (user); each tool result becomes a `tool` turn, in order."""
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(_message_list(value)):
        at = f"messages[{i}]"
        role = message.get("role")
        if role not in ("user", "assistant"):
            message_text = f'{at}.role must be one of "user", "assistant", got {show(role)}'
            raise GatewayError.invalid(message_text, "messages")
        content = message.get("content")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            message_text = (
                f"{at}.content must be a string or an array of content blocks, "
                f"got {json_type(content)}"
            )
            raise GatewayError.invalid(message_text, "messages")
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for k, block in enumerate(_list(content, f"{at}.content")):
            where = f"{at}.content[{k}]"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                texts.append(text_content([block], where, "messages"))
            elif kind == "tool_use" and role == "assistant":
                calls.append(_anthropic_call(block, where))
            elif kind == "tool_result" and role == "user":
                if texts:
                    messages.append({"role": "user", "content": "\n".join(texts)})
                    texts = []
                messages.append(_tool_result(block, where))
            else:
                message_text = f"{where}.type {show(kind)} is not supported in a {role} turn"
                raise GatewayError.invalid(message_text, "messages")
        if calls:
            messages.append({"role": "assistant", "content": "\n".join(texts), "tool_calls": calls})
        elif texts or not messages or messages[-1]["role"] != "tool":
            messages.append({"role": role, "content": "\n".join(texts)})
    if not messages:
        raise GatewayError.invalid("messages must not be empty", "messages")
    return messages


def _settings(tools: list[dict[str, Any]], choice: Any, parallel: bool) -> dict[str, Any]:
    if not tools:
        if isinstance(choice, dict) or choice == "required":
            raise GatewayError.invalid(
                "tool_choice asks for a tool call, but no tools are given", "tool_choice"
            )
        return {}
    choice = choice or "auto"
    if isinstance(choice, dict) and choice.get("name") not in {t["name"] for t in tools}:
        message = f"tool_choice names no given tool: {show(choice.get('name'))}"
        raise GatewayError.invalid(message, "tool_choice")
    if choice != "none":
        try:  # any schema the grammar engine cannot use is refused here, before any work
            tool_call_grammar(tools, choice, parallel)
        except StructuredOutputError as exc:
            raise GatewayError.invalid(f"tools: {exc}", "tools") from None
    return {"tools": tools, "tool_choice": choice, "parallel_tool_calls": parallel}


def _tool(spec: dict[str, Any], schema_key: str, at: str, strict: bool | None) -> dict[str, Any]:
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise GatewayError.invalid(f"{at}.name must be a non-empty string", f"{at}.name")
    schema = spec.get(schema_key, {"type": "object"} if schema_key == "parameters" else None)
    if not isinstance(schema, dict):
        raise GatewayError.invalid(
            f"{at}.{schema_key} must be a JSON schema object", f"{at}.{schema_key}"
        )
    try:
        tool_call_grammar(
            [{"name": name, "parameters": schema, "strict": strict}], "required", False
        )
    except StructuredOutputError as exc:
        raise GatewayError.invalid(f"{at}.{schema_key}: {exc}", f"{at}.{schema_key}") from None
    tool: dict[str, Any] = {"name": name, "parameters": schema, "strict": strict}
    description = spec.get("description")
    if isinstance(description, str) and description:
        tool["description"] = description
    return tool


def _tool_list(value: Any, param: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    tools = _list(value, param)
    if len(tools) > MAX_TOOLS:
        raise GatewayError.invalid(f"{param} may hold at most {MAX_TOOLS} tools", param)
    names = [_tool_name(tool) for tool in tools]
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise GatewayError.invalid(
                f"{param}.{i} must be an object, got {json_type(tool)}", f"{param}.{i}"
            )
        if names[i] is not None and names.index(names[i]) != i:
            raise GatewayError.invalid(
                f"{param}.{i}: a second tool named {names[i]!r}", f"{param}.{i}"
            )
    return tools


def _tool_name(tool: Any) -> Any:
    """The name of an OpenAI ({"function": {"name"}}) or Anthropic ({"name"}) tool, if any."""
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


def _message_list(value: Any) -> list[dict[str, Any]]:
    if value is None:
        raise missing("messages")
    messages = _list(value, "messages")
    if not messages:
        raise GatewayError.invalid("messages must not be empty", "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            message_text = f"messages[{i}] must be an object, got {json_type(message)}"
            raise GatewayError.invalid(message_text, "messages")
    return messages


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        param = where.split("[")[0].split(".")[0]
        raise GatewayError.invalid(f"{where} must be an array, got {json_type(value)}", param)
    return value


def _openai_call(call: Any, at: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise GatewayError.invalid(
            f'{at} must be {{"id", "type": "function", "function": {{"name", "arguments"}}}}',
            "messages",
        )
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        raise GatewayError.invalid(f"{at}.function.arguments must be a JSON string", "messages")
    return {"id": str(call.get("id") or ""), "name": function["name"], "arguments": arguments}


def _anthropic_call(block: dict[str, Any], at: str) -> dict[str, Any]:
    if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
        raise GatewayError.invalid(f"{at} must have a name and an input object", "messages")
    arguments = json.dumps(block.get("input", {}))
    return {"id": str(block.get("id") or ""), "name": block["name"], "arguments": arguments}


def _tool_result(block: dict[str, Any], at: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise GatewayError.invalid(f"{at}.tool_use_id must be a string", "messages")
    content = block.get("content", "")
    text = text_content(content, f"{at}.content", "messages")
    if block.get("is_error") is True:
        text = f"Error: {text}"
    return {"role": "tool", "content": text, "tool_call_id": call_id}
