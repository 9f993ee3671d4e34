"""A Responses API `reasoning` input item, as a client sends back one it was given: its
`reasoning_text` parts are the thoughts; a summary or `encrypted_content` is checked, not read."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel

from common.chat import PART_SEPARATOR
from common.validation import text

Text = Annotated[str, text()]


class ReasoningText(BaseModel):
    type: Literal["reasoning_text"]
    text: Text


class SummaryText(BaseModel):
    type: Literal["summary_text"]
    text: Text


class ReasoningItem(BaseModel):
    type: Literal["reasoning"]
    summary: list[SummaryText] = []
    content: list[ReasoningText] | None = None
    encrypted_content: Text | None = None

    @property
    def thoughts(self) -> str | None:
        """The reasoning_text parts joined by newlines; None when there are none."""
        texts = [part.text for part in self.content or []]
        return PART_SEPARATOR.join(texts) if texts else None
