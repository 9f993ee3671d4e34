"""The Responses API end to end: the openai SDK's responses.create, .stream, .parse, .retrieve
and .delete against `astrai serve` on the default model."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.e2e.harness import Server
from tests.e2e.sdk import MODEL, openai_client

pytestmark = pytest.mark.slow  # real processes and the real default model

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city now.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class City(BaseModel):
    name: str
    country: str


@pytest.fixture(scope="module")
def client(default_server: Server) -> openai.OpenAI:
    return openai_client(default_server)


def test_create_answers_with_one_message_and_usage(client: openai.OpenAI):
    response = client.responses.create(
        model=MODEL,
        instructions="Answer in one short sentence.",
        input="What is the capital of France?",
        max_output_tokens=12,
        temperature=0,
    )
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status in ("completed", "incomplete") and response.model == MODEL
    [message] = response.output
    assert message.type == "message" and message.role == "assistant"
    assert response.output_text == message.content[0].text and response.output_text
    usage = response.usage
    assert usage is not None and 0 < usage.output_tokens <= 12
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert response.instructions == "Answer in one short sentence."


def test_stream_events_add_up_to_the_final_response(client: openai.OpenAI):
    with client.responses.stream(
        model=MODEL, input="Say hello.", max_output_tokens=64, temperature=0
    ) as stream:  # the SDK's final response needs response.completed: room to end
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text and final.output_text
    assert final.id == events[0].response.id


def test_parse_follows_the_schema(client: openai.OpenAI):
    response = client.responses.parse(
        model=MODEL,
        input="Name a city and its country.",
        text_format=City,
        max_output_tokens=48,
        temperature=0,
    )
    assert isinstance(response.output_parsed, City)
    assert City.model_validate_json(response.output_text) == response.output_parsed


def test_a_forced_tool_call_round_trips_through_the_store(client: openai.OpenAI):
    first = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=48,
        temperature=0,
    )
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert set(json.loads(call.arguments)) == {"city"}
    assert call.call_id.startswith("call_")
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        tool_choice="none",
        max_output_tokens=12,
        temperature=0,
    )
    assert second.previous_response_id == first.id
    assert [item.type for item in second.output] == ["message"]
    assert second.usage is not None and second.usage.input_tokens > first.usage.input_tokens  # type: ignore[union-attr]
    assert client.responses.retrieve(first.id).output == first.output
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_hosted_tools_are_ignored_and_named(default_server: Server):
    body = {
        "model": MODEL,
        "input": "Hi.",
        "tools": [{"type": "web_search"}, {"type": "code_interpreter", "container": "auto"}],
        "max_output_tokens": 2,
        "store": False,
    }
    response = httpx.post(f"{default_server.url}/v1/responses", json=body, timeout=120)
    assert response.status_code == 200
    assert response.headers["x-astrai-ignored-tools"] == "web_search, code_interpreter"
    assert response.json()["tools"] == []


def test_a_bad_item_is_a_400_naming_it(client: openai.OpenAI):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL,
            input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],  # type: ignore[list-item]
        )
    assert caught.value.param == "input.0.content.0.type"  # type: ignore[attr-defined]
