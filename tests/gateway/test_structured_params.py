"""Structured-output parameters of both protocols: the worker's spec, or a 400 naming them."""

from typing import Any

import pytest

from gateway.errors import GatewayError
from gateway.protocols.anthropic import AnthropicResponseBuilder
from gateway.protocols.openai import OpenAIResponseBuilder

HELLO = [{"role": "user", "content": "hi"}]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
    "additionalProperties": False,
}


def openai_params(response_format: Any) -> dict[str, Any]:
    body = {"messages": HELLO, "response_format": response_format}
    return OpenAIResponseBuilder().parse(body).params.to_wire()


def anthropic_params(output_config: Any) -> dict[str, Any]:
    body = {"model": "m", "max_tokens": 8, "messages": HELLO, "output_config": output_config}
    return AnthropicResponseBuilder().parse(body).params.to_wire()


def test_openai_json_schema_becomes_the_workers_spec():
    params = openai_params(
        {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    )
    assert params["structured_output"] == {"type": "json_schema", "schema": PERSON, "strict": True}


def test_openai_json_object_and_text():
    assert openai_params({"type": "json_object"})["structured_output"] == {"type": "json_object"}
    assert "structured_output" not in openai_params({"type": "text"})
    assert "structured_output" not in openai_params(None)


def test_anthropic_output_format_is_always_strict():
    params = anthropic_params({"format": {"type": "json_schema", "schema": PERSON}})
    assert params["structured_output"] == {"type": "json_schema", "schema": PERSON, "strict": True}
    assert "structured_output" not in anthropic_params({})


@pytest.mark.parametrize(
    ("response_format", "words"),
    [
        ("json", "must be an object"),
        ({"type": "yaml"}, "response_format.type"),
        ({"type": "json_schema"}, "json_schema must be an object"),
        ({"type": "json_schema", "json_schema": {"schema": PERSON}}, "name"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}},
            "cannot be used: Invalid type: nonsense",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": PERSON, "strict": 1}},
            "strict must be a boolean",
        ),
    ],
)
def test_openai_bad_response_format_is_a_400_naming_it(response_format: Any, words: str):
    with pytest.raises(GatewayError) as caught:
        openai_params(response_format)
    assert caught.value.kind.openai_status == 400 and words in caught.value.message
    assert caught.value.param.startswith("response_format")


@pytest.mark.parametrize(
    ("output_config", "param", "words"),
    [
        ({"effort": "highest"}, "output_config.effort", "must be"),
        ({"verbosity": "low"}, "output_config.verbosity", "not a known parameter"),
        ({"format": {"type": "json_object"}}, "output_config.format", "json_schema"),
        ({"format": {"type": "json_schema"}}, "output_config.format", "schema must be"),
        (
            {"format": {"type": "json_schema", "schema": {"$ref": "#/missing"}}},
            "output_config.format",
            "missing",
        ),
    ],
)
def test_anthropic_bad_output_config_is_a_400_naming_it(output_config: Any, param: str, words: str):
    with pytest.raises(GatewayError) as caught:
        anthropic_params(output_config)
    assert caught.value.kind.openai_status == 400 and caught.value.param == param
    assert words in caught.value.message
