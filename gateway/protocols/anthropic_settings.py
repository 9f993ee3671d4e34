"""Anthropic settings that steer reasoning and context, not sampling: thinking, context
management edits and output_config (effort, format), checked as the Messages API documents.

A model that does not reason has no thinking to budget or to show: `thinking` and `effort`
are accepted and change nothing for it (the README says so); a reasoning model's thoughts
are `thinking` blocks, `disabled` turns them off where its template can (anthropic.py), and
no budget is counted. Context edits other than clearing thinking are refused by name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, PlainValidator, model_validator

from common.validation import MAX_COUNT, integer, invalid, json_object, json_type, show, text

MIN_THINKING_BUDGET = 1024  # as Anthropic's API: a smaller budget is a 400
CLEAR_THINKING = "clear_thinking_"  # clear_thinking_20251015 and the versions after it


class Thinking(BaseModel):
    """`{"type": "enabled", "budget_tokens": N}`, `{"type": "adaptive"}` or disabled.

    A budget at or above max_tokens is accepted (Anthropic refuses it): no budget is
    counted here, and Claude Code sends budget 1024 beside its CLAUDE_CODE_MAX_OUTPUT_TOKENS
    cap whatever that is.
    """

    type: Literal["enabled", "adaptive", "disabled"]
    budget_tokens: Annotated[int, integer(MIN_THINKING_BUDGET, None, MAX_COUNT)] | None = None
    display: Literal["summarized", "omitted"] | None = None

    @model_validator(mode="after")
    def _budget_when_enabled(self) -> Thinking:
        if self.type == "enabled" and self.budget_tokens is None:
            raise invalid("is required when thinking is enabled", "budget_tokens")
        return self


class ThinkingTurns(BaseModel):
    type: Literal["thinking_turns"]
    value: Annotated[int, integer(1, None, MAX_COUNT)]


def _keep(value: Any) -> Literal["all"] | ThinkingTurns:
    """`"all"`, or `{"type": "thinking_turns", "value": N}` with N >= 1."""
    if value == "all":
        return "all"
    if not isinstance(value, dict):
        reason = 'must be "all" or {"type": "thinking_turns", "value": N}'
        raise invalid(f"{reason}, got {json_type(value)}")
    return ThinkingTurns.model_validate(value)


class ContextEdit(BaseModel):
    """One edit; only `clear_thinking_*` is applied here (`keep` defaults to 1 turn)."""

    type: Annotated[str, text(non_empty=True)]
    keep: Annotated[Literal["all"] | ThinkingTurns, PlainValidator(_keep)] | None = None

    @model_validator(mode="after")
    def _an_edit_this_server_applies(self) -> ContextEdit:
        if not self.type.startswith(CLEAR_THINKING):
            raise invalid(f"{show(self.type)} is not supported by this server", "type")
        return self

    @property
    def turns_kept(self) -> int | None:
        """How many of the latest assistant turns keep their thinking; None: all of them."""
        if self.keep == "all":
            return None
        return 1 if self.keep is None else self.keep.value


class ContextManagement(BaseModel):
    edits: list[ContextEdit] = []


class OutputConfig(BaseModel):
    """`effort` (accepted; no thinking to budget here) and `format` (a JSON schema the
    output follows); other keys are refused by name."""

    model_config = ConfigDict(extra="forbid")

    effort: Literal["low", "medium", "high", "max"] | None = None
    format: Annotated[dict[str, Any], json_object()] | None = None
