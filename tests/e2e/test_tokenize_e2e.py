"""Counting and tokenizing without generating, through `astrai serve` on the default model."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from tests.e2e.harness import Server, engine_device
from tests.e2e.sdk import prompt_tokens

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
    assert counted.input_tokens == prompt_tokens(usage)
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
        ("/detokenize", {"tokens": [1, -2]}, "tokens.1"),
        ("/detokenize", {"tokens": [2**64]}, "tokens.0"),
        ("/tokenize", {"prompt": "\ud800"}, "prompt"),
        ("/tokenize", {"messages": [{"role": "user", "content": "\ud800"}]}, "messages.0.content"),
        ("/detokenize", {"tokens": [10**9]}, "tokens"),  # past the vocabulary: the worker says
        ("/tokenize", {}, "prompt"),
        ("/tokenize", {"messages": []}, "messages"),
    ],
)
def test_bad_tokenize_bodies_are_400_naming_the_parameter(
    default_server: Server, path: str, body: dict, param: str
):
    # json.dumps writes a lone surrogate as its "\\ud800" escape, as a client would.
    headers = {"content-type": "application/json"}
    response = httpx.post(f"{default_server.url}{path}", content=json.dumps(body), headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


def test_count_tokens_errors_come_in_anthropics_shape(default_server: Server):
    response = httpx.post(f"{default_server.url}/v1/messages/count_tokens", json={"model": MODEL})
    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert default_server.stats()["open_requests"] == 0


# One chat in the neutral shape both routes share: text parts, a system turn, an earlier
# tool call and its result (an OpenAI history with tool_calls becomes exactly this).
AGREEMENT_CHAT = [
    {
        "role": "system",
        "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
    },
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'}],
    },
    {"role": "tool", "content": "18C", "tool_call_id": "c1"},
    {
        "role": "user",
        "content": [{"type": "text", "text": "And"}, {"type": "text", "text": "Rome?"}],
    },
]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _openai_shape(messages: list[dict]) -> list[dict]:
    """The same chat as an OpenAI client writes it (tool calls under `function`)."""
    out = []
    for message in messages:
        entry = dict(message)
        if "tool_calls" in entry:
            entry["content"] = None
            entry["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in entry["tool_calls"]
            ]
        out.append(entry)
    return out


def test_the_same_chat_gives_the_same_prompt_tokens_over_http_and_in_process(
    default_server: Server,
):
    from common.sampling_params import SamplingParams
    from worker.engine.inference_engine import InferenceEngine

    body = {"messages": _openai_shape(AGREEMENT_CHAT)}
    plain = httpx.post(f"{default_server.url}/tokenize", json=body).json()["tokens"]
    tools = {**body, "tools": [{"type": "function", "function": WEATHER}]}
    with_tools = httpx.post(f"{default_server.url}/tokenize", json=tools).json()["tokens"]
    client = openai.OpenAI(base_url=f"{default_server.url}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=body["messages"], max_tokens=1)
    assert reply.usage.prompt_tokens == len(plain)
    with InferenceEngine(kv_cache_mb=32, max_seqs=2, device=engine_device()) as engine:
        assert engine.tokenize(AGREEMENT_CHAT, SamplingParams()) == plain
        assert engine.tokenize(AGREEMENT_CHAT, SamplingParams(tools=[WEATHER])) == with_tools
        assert engine.generate(AGREEMENT_CHAT, temperature=0, max_tokens=1) is not None
