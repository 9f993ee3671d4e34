"""System turns inside a chat: rendered where they stand when the chat template allows it,
else merged, in order, into the leading system message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SYSTEM_SEPARATOR = "\n\n"


def has_later_system_turn(messages: Sequence[dict[str, Any]]) -> bool:
    return any(message["role"] == "system" for message in messages[1:])


def merge_system_turns(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every system turn's text joined into one leading system message (the first turn's
    own, if it is one), the other turns in their order."""
    systems = [message for message in messages if message["role"] == "system"]
    others = [message for message in messages if message["role"] != "system"]
    if not systems:
        return list(others)
    content = SYSTEM_SEPARATOR.join(str(message["content"]) for message in systems)
    return [{"role": "system", "content": content}, *others]
