"""A reasoning model's thoughts read out of its output text as it streams, apart from its answer.

A reasoning model writes its thoughts between two tags, then its answer. The parser splits
each new piece of text into (reasoning, content). What holds:
- a tag split across pieces is recognized: text that could still become a tag is held back
  until the next piece decides it (or the end releases it);
- newlines next to a tag belong to neither side (`<think>\\n…\\n</think>\\n\\n` as Qwen3
  writes and re-renders it): leading ones of the reasoning and of the answer, trailing ones
  of the reasoning;
- a prompt that opened the tag (DeepSeek-R1's templates end the generation prompt with
  `<think>\\n`) starts the parser inside the reasoning, with no opening tag to wait for;
- output cut inside the reasoning is all reasoning; after the closing tag, every later
  tag is plain answer text.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class ReasoningTags:
    """The tags around a model family's reasoning; `implicit_start`: output that does not
    open with `start` is reasoning anyway until `end` (DeepSeek-R1 may leave it out)."""

    start: str = "<think>"
    end: str = "</think>"
    implicit_start: bool = False


class _Mode(Enum):
    START = "start"  # nothing decided yet: an opening tag may come
    REASONING = "reasoning"
    CONTENT = "content"


class ReasoningParser:
    """Feed output text in order; get back (reasoning, content) of what is decided."""

    def __init__(self, tags: ReasoningTags, opened_by_prompt: bool = False) -> None:
        self.tags = tags
        self._mode = _Mode.REASONING if opened_by_prompt else _Mode.START
        self._pending = ""  # text not handed out yet
        self._at_edge = opened_by_prompt  # right after a tag: newlines there are dropped

    @property
    def in_reasoning(self) -> bool:
        return self._mode is _Mode.REASONING

    def feed(self, text: str) -> tuple[str, str]:
        self._pending += text
        reasoning = content = ""
        if self._mode is _Mode.START:
            self._start()
        if self._mode is _Mode.REASONING:
            reasoning = self._reasoning()
        if self._mode is _Mode.CONTENT:
            content = self._content()
        return reasoning, content

    def flush(self) -> tuple[str, str]:
        """At the end: whatever was held back, on the side it was on."""
        held, self._pending = self._pending, ""
        if self._mode is _Mode.START:
            return ("", held) if not self.tags.implicit_start else (held.strip("\n"), "")
        if self._mode is _Mode.REASONING:
            return held.rstrip("\n"), ""
        return "", held  # nothing is held in the answer: this is empty

    def _start(self) -> None:
        text, start = self._pending.lstrip("\n"), self.tags.start
        if text.startswith(start):
            self._pending = text[len(start) :]
            self._mode, self._at_edge = _Mode.REASONING, True
        elif not text or start.startswith(text):
            return  # still possibly the opening tag
        elif self.tags.implicit_start:
            self._mode, self._at_edge = _Mode.REASONING, True
        else:
            self._mode = _Mode.CONTENT

    def _reasoning(self) -> str:
        """The reasoning decided so far; on the closing tag, the mode turns to content."""
        if self._at_edge:
            self._pending = self._pending.lstrip("\n")
            self._at_edge = not self._pending
        end = self.tags.end
        at = self._pending.find(end)
        if at >= 0:
            reasoning = self._pending[:at].rstrip("\n")
            self._pending = self._pending[at + len(end) :]
            self._mode, self._at_edge = _Mode.CONTENT, True
            return reasoning
        held = _partial_suffix(self._pending, end)
        ready = self._pending[: len(self._pending) - held]
        # Newlines just before the (possible) closing tag are held too: they may be its edge.
        kept = ready.rstrip("\n")
        self._pending = self._pending[len(kept) :]
        return kept

    def _content(self) -> str:
        if self._at_edge:
            self._pending = self._pending.lstrip("\n")
            self._at_edge = not self._pending
        content, self._pending = self._pending, ""
        return content


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag` (0 if none)."""
    for length in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-length:]):
            return length
    return 0
