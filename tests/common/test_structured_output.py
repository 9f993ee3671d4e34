"""Structured-output specs: what compiles, what is refused and why, what is cached."""

import json

import llguidance
import pytest

from common.structured_output import (
    JSON_OBJECT_SCHEMA,
    MAX_JSON_OBJECT_DEPTH,
    StructuredOutputError,
    grammar_text,
)

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def accepts(grammar: str, text: str) -> bool:
    """Whether `text` is a complete sentence of `grammar` (byte-level, no tokenizer)."""
    tokenizer = llguidance.LLTokenizer("byte")
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    ok = matcher.consume_tokens(list(tokenizer.tokenize_str(text)))
    return ok and not matcher.is_error() and matcher.is_accepting()


def test_a_schema_compiles_and_its_grammar_takes_matching_json_only():
    grammar = grammar_text({"type": "json_schema", "schema": PERSON, "strict": True})
    assert accepts(grammar, '{"name":"Ada","age":36}')
    assert not accepts(grammar, '{"name":"Ada"}')  # age is required
    assert not accepts(grammar, '{"name":"Ada","age":"36"}')


def test_properties_keep_the_order_the_schema_gives_them():
    grammar = grammar_text({"type": "json_schema", "schema": PERSON})
    assert accepts(grammar, '{"name":"Ada","age":36}')
    assert not accepts(grammar, '{"age":36,"name":"Ada"}')


def test_json_object_takes_any_object_nested_up_to_the_bound():
    grammar = grammar_text({"type": "json_object"})
    assert accepts(grammar, '{"a":[1,{"b":null}],"c":"d"}')
    assert not accepts(grammar, "[1,2]")  # an object, not any value
    deep = "{" + '"k":{' * (MAX_JSON_OBJECT_DEPTH - 1) + '"k":1' + "}" * MAX_JSON_OBJECT_DEPTH
    assert accepts(grammar, deep)
    too_deep = "{" + '"k":{' * MAX_JSON_OBJECT_DEPTH + '"k":1' + "}" * (MAX_JSON_OBJECT_DEPTH + 1)
    assert not accepts(grammar, too_deep)
    assert JSON_OBJECT_SCHEMA["type"] == "object"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "xml"}, "type must be one of"),
        ({"type": "json_schema"}, "schema must be a JSON schema object"),
        ({"type": "json_schema", "schema": {"type": "nonsense"}}, "nonsense"),
        ({"type": "json_schema", "schema": {"$ref": "#/nowhere"}}, "nowhere"),
        ("json", "must be an object"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(spec, message):
    with pytest.raises(StructuredOutputError, match=message):
        grammar_text(spec)


def test_strict_refuses_what_it_cannot_enforce_and_lenient_does_its_best():
    schema = {"type": "string", "format": "no-such-format"}
    with pytest.raises(StructuredOutputError, match="no-such-format"):
        grammar_text({"type": "json_schema", "schema": schema, "strict": True})
    assert grammar_text({"type": "json_schema", "schema": schema, "strict": False})


def test_the_same_schema_compiles_once():
    spec = {"type": "json_schema", "schema": {**PERSON, "title": "cached-once"}}
    first = grammar_text(spec)
    assert grammar_text(json.loads(json.dumps(spec))) is first
