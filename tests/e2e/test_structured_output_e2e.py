"""Structured output through `astrai serve` on the default model, with both official SDKs."""

from __future__ import annotations

import json

import anthropic
import openai
import pydantic
import pytest

from tests.e2e.harness import Server
from tests.e2e.sdk import MODEL, anthropic_client, ask, openai_client

pytestmark = pytest.mark.slow
PROMPTS = [
    "Describe a person named Ada who is 36 years old.",
    "Who wrote Hamlet?",
    "Write a short poem about the sea.",
]


class Person(pydantic.BaseModel):
    name: str
    age: int


@pytest.mark.parametrize("prompt", PROMPTS)
def test_openai_parse_returns_the_pydantic_object(default_server: Server, prompt: str):
    completion = openai_client(default_server).chat.completions.parse(
        model=MODEL, messages=ask(prompt), response_format=Person, max_tokens=60, temperature=0
    )
    person = completion.choices[0].message.parsed
    assert isinstance(person, Person)


def test_openai_streamed_json_schema_is_valid_json(default_server: Server):
    stream = openai_client(default_server).chat.completions.create(
        model=MODEL,
        messages=ask(PROMPTS[0]),
        max_tokens=60,
        temperature=0.8,
        seed=1,
        stream=True,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": Person.model_json_schema(), "strict": True},
        },
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    Person.model_validate_json(text)


@pytest.mark.parametrize("max_tokens", [3, 30])
def test_openai_json_object_always_parses(default_server: Server, max_tokens: int):
    client = openai_client(default_server)
    for prompt in PROMPTS:
        reply = client.chat.completions.create(
            model=MODEL,
            messages=ask(prompt),
            max_tokens=max_tokens,
            temperature=0,
            response_format={"type": "json_object"},
        )
        assert isinstance(json.loads(reply.choices[0].message.content), dict)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_anthropic_parse_returns_the_pydantic_object(default_server: Server, prompt: str):
    message = anthropic_client(default_server).messages.parse(
        model=MODEL, max_tokens=60, messages=ask(prompt), output_format=Person
    )
    assert isinstance(message.parsed_output, Person)


def test_a_schema_that_cannot_compile_is_a_400_in_each_protocol(default_server: Server):
    bad = {"type": "nonsense"}
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(default_server).chat.completions.create(
            model=MODEL,
            messages=ask("hi"),
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": bad}},
        )
    assert caught.value.body["param"] == "response_format"
    with pytest.raises(anthropic.BadRequestError) as raised:
        anthropic_client(default_server).messages.create(
            model=MODEL,
            max_tokens=8,
            messages=ask("hi"),
            output_config={"format": {"type": "json_schema", "schema": bad}},
        )
    assert "nonsense" in raised.value.message
    stats = default_server.stats()
    assert stats["open_requests"] == 0
