"""Blocking iteration over the events an engine request sends to its sink (a queue)."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

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


T = TypeVar("T")


def each_item_result(
    events: queue.Queue[TokenEvent],
    count: int,
    result: Callable[[TokenEvent], T | None],
    abort: Callable[[], None],
    what: str,
) -> list[T]:
    """`result` of each of a prefill-only request's `count` items (event index i for item i),
    in item order, once all have finished; `abort` runs however the wait ends, so a caller
    gone early frees its pages at once."""
    results: list[T | None] = [None] * count
    try:
        for _, event in until_finished(events, count):
            results[event.index] = result(event)
    finally:
        abort()
    done = [r for r in results if r is not None]
    if len(done) != count:
        raise RuntimeError(f"{what} aborted: the engine is shutting down")
    return done
