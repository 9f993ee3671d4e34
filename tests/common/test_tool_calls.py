"""The tool-call grammar: which answers each tool choice accepts, and what cannot be compiled."""

import json
from typing import Any

import llguidance
import pytest

from common.structured_output import StructuredOutputError
from common.tool_calls import tool_call_grammar

WEATHER = {
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
TIME = {
    "name": "get_time",
    "parameters": {
        "type": "object",
        "properties": {"zone": {"type": "string"}},
        "required": ["zone"],
    },
}
TOOLS = [WEATHER, TIME]


def accepts(grammar: str, text: str) -> bool:
    """Whether `text` is a complete sentence of `grammar` (byte-level, no tokenizer)."""
    tokenizer = llguidance.LLTokenizer("byte")
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    ok = matcher.consume_tokens(list(tokenizer.tokenize_str(text)))
    return ok and not matcher.is_error() and matcher.is_accepting()


def call(name: str, arguments: Any) -> str:
    body = json.dumps(arguments, separators=(",", ":"))
    return f'<tool_call>{{"name":{json.dumps(name)},"arguments":{body}}}</tool_call>'


PARIS = call("get_weather", {"city": "Paris"})
UTC = call("get_time", {"zone": "UTC"})


@pytest.mark.parametrize("parallel", [True, False])
def test_required_accepts_calls_and_refuses_plain_text(parallel: bool) -> None:
    grammar = tool_call_grammar(TOOLS, "required", parallel)
    assert accepts(grammar, PARIS)
    assert accepts(grammar, call("get_weather", {"city": "Paris", "days": 3}))
    assert accepts(grammar, UTC)
    assert not accepts(grammar, "It is sunny.")
    assert not accepts(grammar, "")
    assert not accepts(grammar, "Sure.\n" + PARIS)


def test_arguments_must_match_the_function_schema() -> None:
    grammar = tool_call_grammar(TOOLS, "required", parallel=True)
    assert not accepts(grammar, call("get_weather", {"days": 3}))  # city is required
    assert not accepts(grammar, call("get_weather", {"city": 7}))
    assert not accepts(grammar, call("get_time", {"city": "Paris"}))  # another function's
    assert not accepts(grammar, '<tool_call>{"name":"get_weather","arguments":"Paris"}</tool_call>')


def test_an_unknown_function_name_is_refused() -> None:
    grammar = tool_call_grammar(TOOLS, "required", parallel=True)
    assert not accepts(grammar, call("get_date", {}))
    assert not accepts(grammar, call("get_weathe", {"city": "Paris"}))


def test_calls_are_compact_json_with_the_name_first_and_nothing_else() -> None:
    grammar = tool_call_grammar(TOOLS, "required", parallel=True)
    assert not accepts(
        grammar, '<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>'
    )
    assert not accepts(
        grammar, '<tool_call>{"arguments":{"zone":"UTC"},"name":"get_time"}</tool_call>'
    )
    extra = '<tool_call>{"name":"get_time","arguments":{"zone":"UTC"},"id":"x"}</tool_call>'
    assert not accepts(grammar, extra)
    assert accepts(grammar, UTC)


def test_a_function_without_parameters_takes_any_object() -> None:
    grammar = tool_call_grammar([{"name": "ping"}], "required", parallel=False)
    assert accepts(grammar, call("ping", {}))
    assert accepts(grammar, call("ping", {"a": [1, {"b": None}]}))
    assert not accepts(grammar, call("ping", [1]))


def test_parallel_calls_are_separated_by_a_newline() -> None:
    grammar = tool_call_grammar(TOOLS, "required", parallel=True)
    assert accepts(grammar, f"{PARIS}\n{UTC}")
    assert accepts(grammar, f"{PARIS}\n{PARIS}\n{UTC}")
    assert not accepts(grammar, PARIS + UTC)
    assert not accepts(grammar, f"{PARIS}\n\n{UTC}")


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_without_parallel_calls_only_one_call_is_accepted(choice: str) -> None:
    grammar = tool_call_grammar(TOOLS, choice, parallel=False)
    assert accepts(grammar, PARIS)
    assert not accepts(grammar, f"{PARIS}\n{UTC}")


@pytest.mark.parametrize("parallel", [True, False])
def test_auto_accepts_plain_text_not_starting_with_a_bracket_as_well_as_calls(
    parallel: bool,
) -> None:
    grammar = tool_call_grammar(TOOLS, "auto", parallel)
    assert accepts(grammar, PARIS)
    assert accepts(grammar, "It is sunny in Paris.")
    assert accepts(grammar, "Multi\nline <b>text</b> with { and }")
    assert not accepts(grammar, "<b>bold</b>")
    assert not accepts(grammar, call("get_weather", {"days": 3}))  # a call is still checked
    assert not accepts(grammar, PARIS + "\nand then text")


def test_auto_accepts_both_calls_when_parallel() -> None:
    grammar = tool_call_grammar(TOOLS, "auto", parallel=True)
    assert accepts(grammar, f"{PARIS}\n{UTC}")


@pytest.mark.parametrize("parallel", [True, False])
def test_a_named_choice_accepts_only_calls_of_that_function(parallel: bool) -> None:
    grammar = tool_call_grammar(TOOLS, {"name": "get_time"}, parallel)
    assert accepts(grammar, UTC)
    assert not accepts(grammar, PARIS)
    assert not accepts(grammar, "It is noon.")
    assert accepts(grammar, f"{UTC}\n{UTC}") is parallel


def test_a_named_choice_not_among_the_tools_is_refused() -> None:
    with pytest.raises(StructuredOutputError, match="get_date"):
        tool_call_grammar(TOOLS, {"name": "get_date"}, parallel=True)


@pytest.mark.parametrize("choice", ["none", "any", "whatever"])
def test_a_choice_without_a_grammar_is_refused(choice: str) -> None:
    with pytest.raises(StructuredOutputError, match=choice):
        tool_call_grammar(TOOLS, choice, parallel=True)


def test_no_tools_is_refused() -> None:
    with pytest.raises(StructuredOutputError):
        tool_call_grammar([], "auto", parallel=True)


def test_a_json_object_text_format_makes_plain_answers_json_objects() -> None:
    grammar = tool_call_grammar(TOOLS, "auto", parallel=True, text={"type": "json_object"})
    assert accepts(grammar, '{"answer":"sunny","temp":[21,22]}')
    assert accepts(grammar, PARIS)
    assert not accepts(grammar, "It is sunny.")
    assert not accepts(grammar, "[1,2]")
    assert not accepts(grammar, "")


def test_a_json_schema_text_format_makes_plain_answers_follow_it() -> None:
    schema = {
        "type": "object",
        "properties": {"temp": {"type": "integer"}},
        "required": ["temp"],
    }
    text = {"type": "json_schema", "schema": schema}
    grammar = tool_call_grammar(TOOLS, "auto", parallel=True, text=text)
    assert accepts(grammar, '{"temp":21}')
    assert not accepts(grammar, '{"temp":"21"}')
    assert not accepts(grammar, '{"city":"Paris"}')
    assert accepts(grammar, UTC)


def test_a_bad_text_format_is_refused() -> None:
    with pytest.raises(StructuredOutputError, match="type must be one of"):
        tool_call_grammar(TOOLS, "auto", parallel=True, text={"type": "xml"})


def test_a_schema_the_engine_cannot_compile_is_refused() -> None:
    tools = [{"name": "broken", "parameters": {"type": "nonsense"}}]
    with pytest.raises(StructuredOutputError, match="nonsense"):
        tool_call_grammar(tools, "auto", parallel=True)


def test_unsupported_keywords_are_refused_only_when_every_function_is_strict() -> None:
    parameters = {
        "type": "object",
        "properties": {"when": {"type": "string", "format": "no-such-format"}},
    }
    strict = {"name": "at", "parameters": parameters, "strict": True}
    with pytest.raises(StructuredOutputError, match="no-such-format"):
        tool_call_grammar([strict], "required", parallel=True)
    lenient = {"name": "at_lenient", "parameters": parameters}
    assert tool_call_grammar([strict, lenient], "required", parallel=True)
    assert tool_call_grammar([lenient], "required", parallel=True)
