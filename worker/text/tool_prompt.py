"""Tools and tool turns in the prompt: through the model's chat template when it takes tools,
else in a generic format the tool-call grammar matches (documented in the README)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from common.tool_calls import CALL_CLOSE, CALL_OPEN, CALL_SEPARATOR

TOOLS_INSTRUCTION = (
    "You can call functions to help answer. They are, as JSON signatures:\n<tools>\n{tools}\n"
    "</tools>\nTo call one, answer with "
    f'{CALL_OPEN}{{"name": <function name>, "arguments": <arguments as a JSON object>}}'
    f"{CALL_CLOSE}, one line per call. A function's result comes back in a tool message."
)


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages in the shape transformers' chat templates with tool support read."""
    out: list[dict[str, Any]] = []
    for message in messages:
        entry: dict[str, Any] = {"role": message["role"], "content": message["content"]}
        if message.get("tool_calls"):
            entry["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": _arguments(call)},
                }
                for call in message["tool_calls"]
            ]
        if message.get("tool_call_id"):
            entry["tool_call_id"] = message["tool_call_id"]
        if message.get("reasoning_content"):  # templates that re-render thoughts read it
            entry["reasoning_content"] = message["reasoning_content"]
        out.append(entry)
    return out


def template_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": _signature(tool)} for tool in tools]


def generic_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
) -> list[dict[str, str]]:
    """Plain role/content messages: the tools described in the system message, calls written
    as the grammar has the model write them, results in `tool` turns."""
    out: list[dict[str, str]] = []
    for message in messages:
        content = message["content"]
        calls = message.get("tool_calls") or []
        if calls:
            written = [
                CALL_OPEN
                + json.dumps({"name": call["name"], "arguments": _arguments(call)})
                + CALL_CLOSE
                for call in calls
            ]
            content = CALL_SEPARATOR.join(([content] if content else []) + written)
        entry = {"role": message["role"], "content": content}
        if message.get("reasoning_content"):  # templates that re-render thoughts read it
            entry["reasoning_content"] = message["reasoning_content"]
        out.append(entry)
    if tools:
        signatures = "\n".join(json.dumps(_signature(tool)) for tool in tools)
        instruction = TOOLS_INSTRUCTION.replace("{tools}", signatures)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{instruction}"}
        else:
            out.insert(0, {"role": "system", "content": instruction})
    return out


def _signature(tool: Mapping[str, Any]) -> dict[str, Any]:
    signature: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description"):
        signature["description"] = tool["description"]
    signature["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
    return signature


def _arguments(call: Mapping[str, Any]) -> Any:
    """A call's arguments as a JSON value (they cross the wire as the JSON text clients sent)."""
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments if arguments is not None else {}
