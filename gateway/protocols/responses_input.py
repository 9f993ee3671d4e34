"""Responses API input items as neutral chat turns, and a response's output items as the
assistant turn that continues the conversation (for `previous_response_id`)."""

from __future__ import annotations

from typing import Any

from gateway.protocols.responses_body import InputItem


def input_messages(items: list[InputItem]) -> list[dict[str, Any]]:
    """Neutral turns, in order: `developer` is `system`; consecutive `function_call` items
    are one assistant turn's tool calls (joined to the assistant message just before them);
    each `function_call_output` is a `tool` turn. Reasoning items are dropped: a summary or
    an encrypted chain of thought from another model is nothing this model can read."""
    turns: list[dict[str, Any]] = []
    for item in items:
        if item.type == "message":
            role = "system" if item.role == "developer" else item.role
            turns.append({"role": role, "content": item.content or ""})
        elif item.type == "function_call":
            call = {"id": item.call_id, "name": item.name, "arguments": item.arguments}
            last = turns[-1] if turns else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                turns.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif item.type == "function_call_output":
            turns.append({"role": "tool", "content": item.output, "tool_call_id": item.call_id})
    return turns


def output_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output items (message and function_call) as the turns they add."""
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
    if calls:
        turn["tool_calls"] = calls
    return [turn]
