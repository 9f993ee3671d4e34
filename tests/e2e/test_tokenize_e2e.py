"""Counting and tokenizing without generating, through `astrai serve` on the default model."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow
MODEL = "SmolLM2-135M-Instruct"
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_count_tokens_equals_what_a_request_is_charged(default_server: Server):
    client = anthropic.Anthropic(base_url=default_server.url, api_key="unused", max_retries=0)
    counted = client.messages.count_tokens(model=MODEL, system="Be brief.", messages=CHAT)
    message = client.messages.create(model=MODEL, max_tokens=4, system="Be brief.", messages=CHAT)
    usage = message.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)
    with_tools = client.messages.count_tokens(
        model=MODEL, system="Be brief.", messages=CHAT, tools=[TOOL]
    )
    assert with_tools.input_tokens > counted.input_tokens  # the tools are in the prompt


def test_tokenize_counts_a_chat_as_the_chat_route_does(default_server: Server):
    client = openai.OpenAI(base_url=f"{default_server.url}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
    answer = httpx.post(f"{default_server.url}/tokenize", json={"messages": CHAT}).json()
    assert answer["count"] == reply.usage.prompt_tokens == len(answer["tokens"])
    assert answer["max_model_len"] > answer["count"]


def test_tokenize_and_detokenize_round_trip(default_server: Server):
    prompt = "Tokens, and then text again: ünïcode too."
    tokens = httpx.post(f"{default_server.url}/tokenize", json={"prompt": prompt}).json()
    text = httpx.post(f"{default_server.url}/detokenize", json={"tokens": tokens["tokens"]})
    assert text.json() == {"prompt": prompt}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/detokenize", {"tokens": "abc"}, "tokens"),
        ("/detokenize", {"tokens": [1, -2]}, "tokens"),
        ("/detokenize", {"tokens": [10**9]}, "tokens"),  # past the vocabulary: the worker says
        ("/tokenize", {}, "prompt"),
        ("/tokenize", {"messages": []}, "messages"),
    ],
)
def test_bad_tokenize_bodies_are_400_naming_the_parameter(
    default_server: Server, path: str, body: dict, param: str
):
    response = httpx.post(f"{default_server.url}{path}", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_count_tokens_errors_come_in_anthropics_shape(default_server: Server):
    response = httpx.post(f"{default_server.url}/v1/messages/count_tokens", json={"model": MODEL})
    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert default_server.stats()["open_requests"] == 0
