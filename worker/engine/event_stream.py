"""Blocking iteration over the events an engine request sends to its sink (a queue)."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

from common.token_output import FinishReason
from worker.engine.sequence import TokenEvent


def put_tagged(merged: queue.Queue[tuple[int, TokenEvent]], index: int, event: TokenEvent) -> None:
    merged.put((index, event))


def raise_on_error(event: TokenEvent) -> None:
    if event.finish_reason is FinishReason.ERROR:
        raise RuntimeError(f"generation failed: {event.error}")


def until_finished(events: queue.Queue[Any], num_choices: int) -> Iterator[tuple[int, TokenEvent]]:
    """(tag, event) pairs until every choice has finished; raises on an engine error."""
    remaining = num_choices
    while remaining:
        item = events.get()
        tag, event = item if isinstance(item, tuple) else (0, item)
        raise_on_error(event)
        remaining -= event.finish_reason is not None
        yield tag, event
