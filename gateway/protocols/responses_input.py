"""Responses API input items as neutral chat turns, and a response's output items as the
assistant turn that continues the conversation (for `previous_response_id`)."""

from __future__ import annotations

from typing import Any

from common.chat import PART_SEPARATOR
from gateway.protocols.responses_body import InputItem


def input_messages(items: list[InputItem]) -> list[dict[str, Any]]:
    """Neutral turns, in order: `developer` is `system`; consecutive `function_call` items
    are one assistant turn's tool calls (joined to the assistant message just before them);
    each `function_call_output` is a `tool` turn. A reasoning item's text is the
    `reasoning_content` of the assistant turn that follows it (its summary or encrypted
    content, from another model, is nothing this model can read)."""
    turns: list[dict[str, Any]] = []
    reasoning: list[str] = []  # read, waiting for its assistant turn
    for item in items:
        if item.type == "reasoning":
            reasoning += [item.content] if item.content else []
            continue
        if item.type == "message":
            role = "system" if item.role == "developer" else item.role
            turns.append({"role": role, "content": item.content or ""})
        elif item.type == "function_call":
            call = {"id": item.call_id, "name": item.name, "arguments": item.arguments}
            last = turns[-1] if turns else None
            if last is not None and last["role"] == "assistant" and not reasoning:
                last.setdefault("tool_calls", []).append(call)
            else:
                turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif item.type == "function_call_output":
            turns.append({"role": "tool", "content": item.output, "tool_call_id": item.call_id})
        if turns and turns[-1]["role"] == "assistant" and reasoning:
            turns[-1]["reasoning_content"] = PART_SEPARATOR.join(reasoning)
            reasoning = []
    return turns


def output_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output items (reasoning, message and function_call) as the turns they
    add."""
    text = "".join(
        part.get("text", "")
        for item in output
        if item["type"] == "message"
        for part in item["content"]
    )
    calls = [
        {"id": item["call_id"], "name": item["name"], "arguments": item["arguments"]}
        for item in output
        if item["type"] == "function_call"
    ]
    turn: dict[str, Any] = {"role": "assistant", "content": text}
    thoughts = "".join(
        part["text"] for item in output if item["type"] == "reasoning" for part in item["content"]
    )
    if thoughts:
        turn["reasoning_content"] = thoughts
    if calls:
        turn["tool_calls"] = calls
    return [turn]


def input_item_objects(items: list[InputItem], response_id: str) -> list[dict[str, Any]]:
    """A request's input items as `GET /v1/responses/{id}/input_items` lists them: each with
    an id made from the response's and its place (`msg_…_in0`), in the API's item shapes."""
    suffix = response_id.removeprefix("resp_")
    objects = []
    for i, item in enumerate(items):
        shaped: dict[str, Any]
        if item.type == "message":
            part = "output_text" if item.role == "assistant" else "input_text"
            content: dict[str, Any] = {"type": part, "text": item.content or ""}
            if part == "output_text":
                content["annotations"] = []
            shaped = {"type": "message", "role": item.role, "content": [content]}
        elif item.type == "function_call":
            shaped = {"type": "function_call", "call_id": item.call_id, "name": item.name}
            shaped["arguments"] = item.arguments
        elif item.type == "function_call_output":
            shaped = {
                "type": "function_call_output",
                "call_id": item.call_id,
                "output": item.output,
            }
        else:
            text = [{"type": "reasoning_text", "text": item.content}] if item.content else []
            shaped = {"type": "reasoning", "summary": [], "content": text}
        prefix = _ID_PREFIXES[item.type]
        objects.append({"id": f"{prefix}_{suffix}_in{i}", **shaped, "status": "completed"})
    return objects


_ID_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
}
