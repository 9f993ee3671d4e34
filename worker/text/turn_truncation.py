"""The Responses API's `truncation: "auto"`: a chat too long for the context loses its oldest
turns until it fits, rather than being refused."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

Turns = Sequence[Mapping[str, Any]]


def fit_turns(
    turns: Turns, render: Callable[[Turns], list[int]], fits: Callable[[list[int]], bool]
) -> list[int]:
    """The ids of `turns` rendered without as few of the oldest turns as make them fit.

    The leading system turns stay, and what is kept of the rest starts at a user turn (a
    template may refuse a chat that does not, and a tool result must not lose its call). The
    search is binary over where the kept turns start: fewer turns never render longer. If
    nothing fits, the shortest of them is returned, which the caller's length check refuses.
    """
    ids = render(turns)
    if fits(ids):
        return ids
    head = 0
    while head < len(turns) and turns[head].get("role") == "system":
        head += 1
    starts = [i for i in range(head + 1, len(turns)) if turns[i].get("role") == "user"]
    if not starts:
        return ids
    low, high, best = 0, len(starts) - 1, None
    while low <= high:
        middle = (low + high) // 2
        candidate = render([*turns[:head], *turns[starts[middle] :]])
        if fits(candidate):
            best, high = candidate, middle - 1
        else:
            low = middle + 1
    return best if best is not None else render([*turns[:head], *turns[starts[-1] :]])
