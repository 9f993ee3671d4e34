"""Which tags a template gets, whether a prompt opened them, and a request's template
variables."""

from __future__ import annotations

import pytest

from common.sampling_params import SamplingParams
from worker.text.reasoning_format import (
    FORMATS,
    closing_suffix,
    opens_reasoning,
    reasoning_tags,
    template_kwargs,
)

QWEN3 = FORMATS["qwen3"]
TOOLS = ({"name": "f", "parameters": {"type": "object"}},)


@pytest.mark.parametrize(
    ("choice", "template", "expected"),
    [
        ("auto", "{{ '<think>\\n' }}…{{ content.split('</think>')[-1] }}", QWEN3),
        ("auto", "<|im_start|>{{ message.content }}", None),
        ("auto", None, None),
        ("none", "… </think> …", None),
        ("qwen3", None, QWEN3),
        ("deepseek_r1", "", FORMATS["deepseek_r1"]),
    ],
)
def test_the_tags_come_from_the_flag_or_the_template(choice, template, expected):
    assert reasoning_tags(choice, template) == expected


@pytest.mark.parametrize(
    ("tail", "continues", "opened"),
    [
        ("<|im_start|>assistant\n<think>\n", False, True),
        ("<|im_start|>assistant\n", False, False),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False, False),
        ("<|im_start|>assistant\n<think>\nSo far", True, True),  # a prefill inside it
        ("<|im_start|>assistant\n<think>\nSo far", False, False),
        ("<|im_start|>assistant\n<think>a</think>b", True, False),
    ],
)
def test_a_prompt_opens_the_reasoning_at_its_end_or_in_a_continued_message(tail, continues, opened):
    assert opens_reasoning(tail, QWEN3, continues) is opened


def test_constrained_requests_turn_thinking_off_unless_they_say_otherwise():
    assert template_kwargs(SamplingParams(), QWEN3) == {}
    assert template_kwargs(SamplingParams(tools=TOOLS), QWEN3) == {"enable_thinking": False}
    assert template_kwargs(SamplingParams(tools=TOOLS, tool_choice="none"), QWEN3) == {}
    asked = SamplingParams(tools=TOOLS, chat_template_kwargs={"enable_thinking": True, "x": 1})
    assert template_kwargs(asked, QWEN3) == {"enable_thinking": True, "x": 1}
    assert template_kwargs(SamplingParams(tools=TOOLS), None) == {}  # a model without reasoning


def test_only_a_constrained_prompt_left_inside_the_reasoning_gets_it_closed():
    spec = SamplingParams(structured_output={"type": "json_object"})
    assert closing_suffix("assistant\n<think>\n", QWEN3, spec) == "</think>\n\n"
    assert closing_suffix("assistant\n", QWEN3, spec) == ""
    assert closing_suffix("assistant\n<think>\n", QWEN3, SamplingParams()) == ""
    assert closing_suffix("assistant\n<think>\n", None, spec) == ""
