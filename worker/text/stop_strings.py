"""Stop strings over streamed text: hold back what could start a stop, cut at the first match."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class StopResult(NamedTuple):
    text: str  # safe to emit now; never contains a stop string or its start
    matched: str | None  # the stop string found, if any (not part of `text`)


class StopStringMatcher:
    """Finds the earliest of several stop strings in text that arrives in pieces."""

    def __init__(self, stops: Sequence[str]) -> None:
        if any(not stop for stop in stops):
            raise ValueError("stop strings must be non-empty")
        self._stops = tuple(stops)
        self._held = ""

    def feed(self, delta: str) -> StopResult:
        if not self._stops:
            return StopResult(delta, None)
        text = self._held + delta
        match = self._earliest_match(text)
        if match is not None:
            start, stop = match
            self._held = ""
            return StopResult(text[:start], stop)
        keep = self._longest_stop_prefix_suffix(text)
        self._held = text[len(text) - keep :] if keep else ""
        return StopResult(text[: len(text) - keep], None)

    def flush(self) -> str:
        """The held-back text, released when generation ends for another reason."""
        held, self._held = self._held, ""
        return held

    def _earliest_match(self, text: str) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for stop in self._stops:
            at = text.find(stop)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, stop)
        return best

    def _longest_stop_prefix_suffix(self, text: str) -> int:
        """Length of the longest end of `text` that a stop string starts with."""
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if stop.startswith(text[-size:]):
                    longest = size
                    break
        return longest
