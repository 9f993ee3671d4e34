"""Anthropic context management: the thinking each `clear_thinking_*` edit clears, reported
as the response's `context_management.applied_edits`."""

from __future__ import annotations

from typing import Any

from gateway.protocols.anthropic_body import Message
from gateway.protocols.anthropic_settings import ContextManagement

THINKING_BLOCKS = ("thinking", "redacted_thinking")


def num_thinking_turns(messages: list[Message]) -> int:
    """Assistant turns that hold thinking, as the edits count them."""
    return sum(
        message.role == "assistant" and any(b.type in THINKING_BLOCKS for b in message.content)
        for message in messages
    )


def thinking_turns_kept(management: ContextManagement | None) -> int | None:
    """How many of the latest thinking turns keep their thinking after every edit; None: all.
    The others' thinking is left out of the prompt (anthropic_messages)."""
    kept = [edit.turns_kept for edit in management.edits] if management is not None else []
    counts = [count for count in kept if count is not None]
    return min(counts) if counts else None


def applied_edits(management: ContextManagement, messages: list[Message]) -> list[dict[str, Any]]:
    """Each edit that cleared something: all but the latest `keep` thinking turns.

    `cleared_input_tokens` is 0: the gateway has no tokenizer to count them with, and a
    template that renders earlier thinking at all (Qwen3's) renders only that of the turns
    after the latest user message.
    """
    applied = []
    remaining = num_thinking_turns(messages)
    for edit in management.edits:
        kept = edit.turns_kept
        cleared = 0 if kept is None else max(0, remaining - kept)
        remaining -= cleared
        if cleared:
            applied.append(
                {"type": edit.type, "cleared_thinking_turns": cleared, "cleared_input_tokens": 0}
            )
    return applied
