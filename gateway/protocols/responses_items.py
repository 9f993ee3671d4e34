"""The Responses API's output items and content parts as its events carry them: new ones,
snapshots (an event, once made, never changes) and token logprobs in their two shapes."""

from __future__ import annotations

from typing import Any

from common.token_output import TokenLogprob


def message_item(item_id: str) -> dict[str, Any]:
    """An assistant message, before its output_text part is added."""
    return {
        "id": item_id,
        "type": "message",
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }


def reasoning_item(item_id: str) -> dict[str, Any]:
    """A reasoning item (the SDK's ResponseReasoningItem), before its reasoning_text part."""
    return {
        "id": item_id,
        "type": "reasoning",
        "status": "in_progress",
        "summary": [],
        "content": [],
    }


def text_part() -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}


def reasoning_part() -> dict[str, Any]:
    return {"type": "reasoning_text", "text": ""}


def logprob(entry: TokenLogprob, *, with_bytes: bool) -> dict[str, Any]:
    """A token's logprob as output_text parts carry it (with bytes), or as deltas do."""

    def one(token: str, logprob: float | None) -> dict[str, Any]:
        shaped: dict[str, Any] = {"token": token, "logprob": logprob}
        if with_bytes:  # errors="replace": half a code point must not fail the response
            shaped["bytes"] = list(token.encode("utf-8", "replace"))
        return shaped

    top = [one(alt.text, alt.logprob) for alt in entry.top]
    return {**one(entry.text, entry.logprob), "top_logprobs": top}


def without_bytes(entry: dict[str, Any]) -> dict[str, Any]:
    top = [{"token": t["token"], "logprob": t["logprob"]} for t in entry["top_logprobs"]]
    return {"token": entry["token"], "logprob": entry["logprob"], "top_logprobs": top}


def copy_item(item: dict[str, Any]) -> dict[str, Any]:
    """A snapshot of an item: later deltas must not change an event already made."""
    copied = dict(item)
    if "content" in copied:
        copied["content"] = [copy_part(part) for part in item["content"]]
    return copied


def copy_part(part: dict[str, Any]) -> dict[str, Any]:
    return {**part, "logprobs": list(part["logprobs"])} if "logprobs" in part else dict(part)
