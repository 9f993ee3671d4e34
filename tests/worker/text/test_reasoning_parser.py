"""The reasoning parser: tags split at every position across pieces, no tags, unclosed, opened
by the prompt, and DeepSeek-R1's missing opening tag."""

from __future__ import annotations

import pytest

from worker.text.reasoning_parser import ReasoningParser, ReasoningTags

QWEN3 = ReasoningTags()
R1 = ReasoningTags(implicit_start=True)
ANSWER = "<think>\nLet me add: 2 + 2 = 4.\n</think>\n\nThe answer is 4."


def split(parser: ReasoningParser, pieces: list[str]) -> tuple[str, str]:
    """Everything fed in `pieces` and flushed, as (reasoning, content)."""
    reasoning = content = ""
    for piece in pieces:
        more_reasoning, more_content = parser.feed(piece)
        reasoning, content = reasoning + more_reasoning, content + more_content
    held_reasoning, held_content = parser.flush()
    return reasoning + held_reasoning, content + held_content


def test_whole_text_splits_into_reasoning_and_answer_without_the_newlines_at_the_tags():
    assert split(ReasoningParser(QWEN3), [ANSWER]) == ("Let me add: 2 + 2 = 4.", "The answer is 4.")


@pytest.mark.parametrize("cut", range(1, len(ANSWER)))
def test_a_split_at_any_position_gives_the_same_parts(cut: int):
    pieces = [ANSWER[:cut], ANSWER[cut:]]
    assert split(ReasoningParser(QWEN3), pieces) == ("Let me add: 2 + 2 = 4.", "The answer is 4.")


def test_one_character_at_a_time_gives_the_same_parts_and_never_hands_out_a_tag():
    parser = ReasoningParser(QWEN3)
    handed_out = [parser.feed(char) for char in ANSWER]
    assert all("<" not in reasoning + content for reasoning, content in handed_out)
    reasoning = "".join(r for r, _ in handed_out)
    content = "".join(c for _, c in handed_out)
    assert (reasoning, content) == ("Let me add: 2 + 2 = 4.", "The answer is 4.")
    assert parser.flush() == ("", "")


def test_reasoning_streams_before_the_closing_tag_arrives():
    parser = ReasoningParser(QWEN3)
    assert parser.feed("<think>\nStep one") == ("Step one", "")
    assert parser.in_reasoning
    assert parser.feed(", step two</thi") == (", step two", "")  # "</thi" is held
    assert parser.feed("nk>\n\nDone") == ("", "Done")
    assert not parser.in_reasoning


def test_text_that_only_looks_like_a_tag_is_released_when_it_is_not_one():
    parser = ReasoningParser(QWEN3)
    assert parser.feed("<think>a </t") == ("a ", "")
    assert parser.feed("able> c") == ("</table> c", "")


def test_without_tags_everything_is_the_answer():
    assert split(ReasoningParser(QWEN3), ["Hello", " there", "\n"]) == ("", "Hello there\n")


def test_an_answer_that_starts_with_another_tag_is_the_answer():
    parser = ReasoningParser(QWEN3)
    assert parser.feed("<t") == ("", "")  # could still be <think>
    assert parser.feed("ool_call>{") == ("", "<tool_call>{")


def test_a_lone_partial_tag_at_the_end_is_the_answer():
    assert split(ReasoningParser(QWEN3), ["<thi"]) == ("", "<thi")


def test_output_cut_inside_the_reasoning_is_all_reasoning():
    assert split(ReasoningParser(QWEN3), ["<think>\nHmm, so", " far\n"]) == ("Hmm, so far", "")
    # A closing tag cut short is text the model wrote, not a tag.
    assert split(ReasoningParser(QWEN3), ["<think>\nHmm\n</th"]) == ("Hmm\n</th", "")


def test_tags_after_the_reasoning_closed_are_answer_text():
    pieces = ["<think>a</think>", "b <think>c</think>"]
    assert split(ReasoningParser(QWEN3), pieces) == ("a", "b <think>c</think>")


def test_an_empty_reasoning_as_qwen3_writes_it_with_thinking_off():
    assert split(ReasoningParser(QWEN3), ["<think>\n\n</think>\n\nHi"]) == ("", "Hi")


@pytest.mark.parametrize("cut", range(0, 30))
def test_a_prompt_that_opened_the_tag_starts_inside_the_reasoning(cut: int):
    text = "Thinking it over.\n</think>\n\nYes."
    pieces = [text[:cut], text[cut:]]
    assert split(ReasoningParser(QWEN3, opened_by_prompt=True), pieces) == (
        "Thinking it over.",
        "Yes.",
    )


def test_a_prompt_opened_reasoning_cut_by_the_budget_is_all_reasoning():
    parser = ReasoningParser(QWEN3, opened_by_prompt=True)
    assert split(parser, ["\nStill", " thinking"]) == ("Still thinking", "")


def test_deepseek_r1_takes_output_without_the_opening_tag_as_reasoning():
    assert split(ReasoningParser(R1), ["Let me", " see</think>Fine."]) == ("Let me see", "Fine.")
    assert split(ReasoningParser(R1), ["<think>x</think>y"]) == ("x", "y")
    assert split(ReasoningParser(R1), ["no close"]) == ("no close", "")


def test_qwen3_without_the_opening_tag_is_all_answer_even_with_a_closing_tag():
    assert split(ReasoningParser(QWEN3), ["Let me see</think>Fine."]) == (
        "",
        "Let me see</think>Fine.",
    )
