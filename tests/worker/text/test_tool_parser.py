"""Tool calls read out of streamed output: the same calls whatever the chunking, text as content."""

import json
from typing import Any

import pytest

from common.token_output import ToolCallDelta
from worker.text.tool_parser import ToolCallParser


def call_text(name: str, arguments: Any) -> str:
    """A call as the grammar has the model write it: compact JSON, name first."""
    body = json.dumps(arguments, separators=(",", ":"))
    return f'<tool_call>{{"name":{json.dumps(name)},"arguments":{body}}}</tool_call>'


def parse(text: str, size: int) -> tuple[str, list[ToolCallDelta], ToolCallParser]:
    """Feed `text` in chunks of `size` characters, then flush: (all content, deltas, parser)."""
    parser = ToolCallParser()
    content, deltas = "", []
    for start in range(0, len(text), size):
        piece, more = parser.feed(text[start : start + size])
        content += piece
        deltas += more
    return content + parser.flush(), deltas, parser


def assembled(deltas: list[ToolCallDelta]) -> list[dict[str, Any]]:
    """The calls the deltas describe, in index order, checking that each id comes once, first."""
    indexes = [delta.index for delta in deltas]
    assert indexes == sorted(indexes), "a call's deltas all come before the next call's"
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas:
        if delta.index not in calls:
            assert delta.id and delta.name, "a call's first delta carries its id and name"
            calls[delta.index] = {"id": delta.id, "name": delta.name, "arguments": ""}
        else:
            assert delta.id is None and delta.name is None, "id and name go out only once"
        calls[delta.index]["arguments"] += delta.arguments
    assert sorted(calls) == list(range(len(calls))), "indexes count up from 0"
    return [calls[index] for index in sorted(calls)]


WEATHER = {"city": "Paris", "days": 3}
NESTED = {
    "query": {"filters": [{"field": "a", "in": [1, [2, 3], {}]}, {"deep": {"x": [None, True]}}]},
    "tags": [],
    "limit": -2.5,
}
TRICKY_STRINGS = {
    "quote": 'she said "hi}" and ]{ left',
    "backslash": "C:\\dir\\",
    "escaped_then_quote": '\\"',
    "unicode": "é ✓ \n\t",
}


@pytest.mark.parametrize(
    "arguments",
    [WEATHER, NESTED, TRICKY_STRINGS, {}],
    ids=["flat", "nested", "tricky-strings", "empty"],
)
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_a_call_split_into_chunks_of_any_size_gives_the_same_call(
    arguments: dict[str, Any], ensure_ascii: bool
) -> None:
    body = json.dumps(arguments, separators=(",", ":"), ensure_ascii=ensure_ascii)
    text = f'<tool_call>{{"name":"lookup","arguments":{body}}}</tool_call>'
    for size in range(1, len(text) + 1):
        content, deltas, parser = parse(text, size)
        calls = assembled(deltas)
        assert content == "", size
        assert [(call["name"], call["arguments"]) for call in calls] == [("lookup", body)], size
        assert json.loads(calls[0]["arguments"]) == arguments
        assert parser.num_calls == 1


def test_two_calls_get_indexes_0_and_1_and_distinct_ids() -> None:
    first, second = call_text("get_weather", WEATHER), call_text("get_time", {"zone": "UTC"})
    text = f"{first}\n{second}"
    for size in range(1, len(text) + 1):
        content, deltas, parser = parse(text, size)
        calls = assembled(deltas)
        assert content == ""
        assert [(call["name"], json.loads(call["arguments"])) for call in calls] == [
            ("get_weather", WEATHER),
            ("get_time", {"zone": "UTC"}),
        ], size
        assert calls[0]["id"] != calls[1]["id"]
        assert parser.num_calls == 2


def test_ids_differ_between_parsers() -> None:
    text = call_text("f", {})
    _, first, _ = parse(text, len(text))
    _, second, _ = parse(text, len(text))
    assert first[0].id != second[0].id


@pytest.mark.parametrize(
    "text",
    [
        "It is sunny in Paris.",
        "\n\nLeading newlines stay.",
        "a < b, and <tool_call> later is just text",
        'Plain first\n<tool_call>{"name":"f","arguments":{}}</tool_call>',
        "{}",
    ],
)
def test_plain_text_is_content_unchanged(text: str) -> None:
    for size in range(1, len(text) + 1):
        content, deltas, parser = parse(text, size)
        assert content == text, size
        assert deltas == []
        assert parser.num_calls == 0


@pytest.mark.parametrize(
    "text",
    ["<to be or not to be>", "<tool_cal!", "<tool_callx", "\n<tool>", "<", "<tool_call"],
)
def test_text_starting_with_a_strict_prefix_of_the_call_tag_is_content(text: str) -> None:
    for size in range(1, len(text) + 1):
        content, deltas, parser = parse(text, size)
        assert content == text, size
        assert deltas == []
        assert parser.num_calls == 0


def test_a_prefix_of_the_call_tag_is_held_back_until_it_is_told_apart() -> None:
    parser = ToolCallParser()
    assert parser.feed("<to") == ("", [])
    assert parser.feed("p") == ("<top", [])


def test_only_newlines_are_held_back_and_flushed_as_content() -> None:
    parser = ToolCallParser()
    assert parser.feed("\n\n") == ("", [])
    assert parser.flush() == "\n\n"


@pytest.mark.parametrize("after", ["", "\n", "\n\n"])
def test_flush_after_calls_returns_nothing(after: str) -> None:
    text = call_text("f", {"a": 1}) + after
    for size in range(1, len(text) + 1):
        content, deltas, parser = parse(text, size)
        assert content == "", size
        assert parser.num_calls == 1
        assert [call["arguments"] for call in assembled(deltas)] == ['{"a":1}']


def test_text_after_the_calls_is_not_content() -> None:
    text = call_text("f", {"a": 1}) + "\nand some words"
    for size in range(1, len(text) + 1):
        content, deltas, parser = parse(text, size)
        assert content == "", size
        assert parser.num_calls == 1
        assert len(assembled(deltas)) == 1


def test_flush_holds_nothing_back_after_a_call() -> None:
    parser = ToolCallParser()
    content, deltas = parser.feed(call_text("f", {}) + "\n<tool_")
    assert content == ""
    assert len(deltas) == 2
    assert parser.flush() == ""


def test_a_call_cut_short_yields_the_deltas_seen_so_far() -> None:
    full = call_text("search", {"query": {"text": "a}b", "k": [1, 2]}})
    text = full[: full.index('"k"')]  # ends inside the arguments
    for size in range(1, len(text) + 1):
        content, deltas, parser = parse(text, size)
        calls = assembled(deltas)
        assert content == "", size
        assert [call["name"] for call in calls] == ["search"]
        assert calls[0]["arguments"] == '{"query":{"text":"a}b",'
        assert parser.num_calls == 0


def test_a_second_call_cut_short_is_not_counted() -> None:
    second = call_text("g", {"b": [1, 2]})
    text = call_text("f", {"a": 1}) + "\n" + second[: second.index(",2]")]
    for size in range(1, len(text) + 1):
        content, deltas, parser = parse(text, size)
        calls = assembled(deltas)
        assert content == ""
        assert [call["name"] for call in calls] == ["f", "g"]
        assert calls[0]["arguments"] == '{"a":1}'
        assert calls[1]["arguments"] == '{"b":[1'
        assert parser.num_calls == 1


def test_a_call_cut_short_before_its_name_is_complete_yields_nothing() -> None:
    text = '<tool_call>{"name":"get_wea'
    for size in range(1, len(text) + 1):
        content, deltas, parser = parse(text, size)
        assert (content, deltas, parser.num_calls) == ("", [], 0), size


def test_the_name_goes_out_as_soon_as_it_is_complete() -> None:
    parser = ToolCallParser()
    assert parser.feed('<tool_call>{"name":"f"') == ("", [])
    content, deltas = parser.feed(',"arguments":')
    assert content == ""
    assert [(delta.index, delta.name, delta.arguments) for delta in deltas] == [(0, "f", "")]
    content, deltas = parser.feed('{"a"')
    assert [(delta.index, delta.id, delta.arguments) for delta in deltas] == [(0, None, '{"a"')]


def test_between_calls_only_once_a_call_is_complete_and_before_the_next_begins() -> None:
    parser = ToolCallParser()
    seen = []
    for piece in [
        "<tool_call>",
        '{"name":"f","arguments":{"a":1}',
        "}</tool_call>",
        "\n",
        "<tool",
        '_call>{"name":"g","arguments":{}}</tool_call>',
    ]:
        parser.feed(piece)
        seen.append(parser.between_calls)
    assert seen == [False, False, True, True, False, True]


def test_not_between_calls_in_plain_text() -> None:
    parser = ToolCallParser()
    parser.feed("\n")
    assert not parser.between_calls
    parser.feed("Hello")
    assert not parser.between_calls
