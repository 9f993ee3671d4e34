"""Which reasoning tags a model writes (`--reasoning-parser`, or its chat template), and how a
request's prompt turns its reasoning on or off.

`auto` (the default) reads a template that writes `</think>` (Qwen3, QwQ, DeepSeek-R1's
distills) as `qwen3`; `deepseek_r1` also takes output that never opened the tag as reasoning
until `</think>`; `none` leaves every output as it is. A grammar-constrained request
(structured output, tool calls) decides the whole answer's shape, reasoning has no place in
it: its template is rendered with `enable_thinking=False` (unless the request set that
variable itself), and a prompt that still opens the reasoning gets it closed, empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worker.text.reasoning_parser import ReasoningParser, ReasoningTags

if TYPE_CHECKING:  # pydantic stays out of the option classes' imports (`astrai serve`)
    from common.sampling_params import SamplingParams

FORMATS = {
    "qwen3": ReasoningTags(),
    "deepseek_r1": ReasoningTags(implicit_start=True),
}
PARSER_CHOICES = ("auto", "none", *FORMATS)
THINKING_VARIABLE = "enable_thinking"  # Qwen3's template variable (vLLM's, SGLang's too)


def reasoning_tags(choice: str, chat_template: str | None) -> ReasoningTags | None:
    """The tags `choice` names; `auto`: Qwen3's when the template writes `</think>`."""
    if choice not in PARSER_CHOICES:
        raise ValueError(f"reasoning_parser must be one of {PARSER_CHOICES}, got {choice!r}")
    if choice == "none":
        return None
    if choice == "auto":
        return FORMATS["qwen3"] if "</think>" in (chat_template or "") else None
    return FORMATS[choice]


def template_kwargs(params: SamplingParams, tags: ReasoningTags | None) -> dict[str, Any]:
    """The request's template variables; a constrained request to a reasoning model gets
    thinking turned off unless it says otherwise."""
    kwargs = dict(params.chat_template_kwargs)
    if tags is not None and params.is_constrained:
        kwargs.setdefault(THINKING_VARIABLE, False)
    return kwargs


def opens_reasoning(prompt_tail: str, tags: ReasoningTags, continues: bool) -> bool:
    """Whether the prompt leaves the answer inside the reasoning: its generation prompt ends
    with the opening tag, or (continuing a final assistant message) that message opened the
    tag and did not close it."""
    if prompt_tail.rstrip().endswith(tags.start):
        return True
    at = prompt_tail.rfind(tags.start)
    return continues and at >= 0 and tags.end not in prompt_tail[at:]


def closing_suffix(prompt_tail: str, tags: ReasoningTags | None, params: SamplingParams) -> str:
    """What a constrained request's prompt gets appended: the closing tag when the template
    opened the reasoning and could not be told not to (the grammar then shapes the answer
    after it, as Qwen3's template writes an empty reasoning when thinking is off)."""
    if tags is None or not params.is_constrained:
        return ""
    return tags.end + "\n\n" if opens_reasoning(prompt_tail, tags, continues=False) else ""


def reasoning_parser(
    tags: ReasoningTags | None, params: SamplingParams, prompt_tail: str
) -> ReasoningParser | None:
    """A choice's parser, or None where its output holds no reasoning: no tags, or a
    grammar that leaves reasoning no room."""
    if tags is None or params.is_constrained:
        return None
    return ReasoningParser(tags, opens_reasoning(prompt_tail, tags, params.continue_final_message))
