"""Anthropic protocol end to end: the official SDK against `astrai serve` on a tiny model."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.conftest import TINY_NAME
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow  # real processes (`astrai serve` and more)

MESSAGES = [{"role": "user", "content": "Tell me something."}]
# This SDK release has no sampling arguments; the API still takes them, so they go as JSON.
GREEDY = {"extra_body": {"temperature": 0}}


@pytest.fixture(scope="module")
def client(tiny_server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=tiny_server.url, api_key="unused", max_retries=0)


def test_message_shape_and_usage(client: anthropic.Anthropic):
    message = client.messages.create(
        model=TINY_NAME,
        max_tokens=5,
        messages=MESSAGES,
        **GREEDY,
        system="You are terse.",
        metadata={"user_id": "u-1"},
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.content[0].type == "text"
    assert message.usage.output_tokens == 5


def test_every_parameter_is_accepted(client: anthropic.Anthropic):
    message = client.messages.create(
        model=TINY_NAME,
        max_tokens=6,
        system=[{"type": "text", "text": "You are terse."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Again."},
        ],
        stop_sequences=["\n\n\n\n"],
        extra_body={"temperature": 0.7, "top_p": 0.9, "top_k": 10},
    )
    assert message.stop_reason in ("max_tokens", "end_turn", "stop_sequence")


def test_stop_sequence_is_reported(client: anthropic.Anthropic):
    full = (
        client.messages.create(model=TINY_NAME, max_tokens=16, messages=MESSAGES, **GREEDY)
        .content[0]
        .text
    )
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    assert stop
    message = client.messages.create(
        model=TINY_NAME, max_tokens=16, messages=MESSAGES, **GREEDY, stop_sequences=[stop]
    )
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", stop)
    assert message.content[0].text == full[: full.index(stop)]


def test_sdk_stream_events_in_order(client: anthropic.Anthropic):
    events = list(
        client.messages.create(
            model=TINY_NAME, max_tokens=4, messages=MESSAGES, **GREEDY, stream=True
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) <= {"content_block_delta"}
    assert events[0].message.usage.input_tokens > 0
    assert events[-2].delta.stop_reason == "max_tokens" and events[-2].usage.output_tokens == 4
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    whole = client.messages.create(model=TINY_NAME, max_tokens=4, messages=MESSAGES, **GREEDY)
    assert text == whole.content[0].text


def test_streamed_usage_ends_as_the_whole_response_reports_it(client: anthropic.Anthropic):
    """message_delta carries the final input / cache-read split, so the SDK's accumulated
    message has the same usage as a non-streamed one for the same (now cached) prompt."""
    request = {"model": TINY_NAME, "max_tokens": 4, "messages": MESSAGES, **GREEDY}
    client.messages.create(**request)  # the prompt's full pages are cached from here on
    whole = client.messages.create(**request)
    with client.messages.stream(**request) as stream:
        streamed = stream.get_final_message()
    assert whole.usage.cache_read_input_tokens > 0
    assert streamed.usage.input_tokens == whole.usage.input_tokens
    assert streamed.usage.cache_read_input_tokens == whole.usage.cache_read_input_tokens
    assert streamed.usage.cache_creation_input_tokens == whole.usage.cache_creation_input_tokens
    assert streamed.usage.output_tokens == whole.usage.output_tokens == 4


def test_raw_sse_lines_pair_event_and_data(tiny_server: Server):
    body = {"model": TINY_NAME, "max_tokens": 2, "messages": MESSAGES, "stream": True}
    with httpx.stream("POST", f"{tiny_server.url}/v1/messages", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    names = [line[7:] for line in lines if line.startswith("event: ")]
    assert len(names) * 2 == len(lines)
    assert names[0] == "message_start" and names[-1] == "message_stop"


def test_max_tokens_past_the_context_is_cut_to_what_it_leaves_on_every_route(
    tiny_server: Server,
):
    """Claude Code always asks for 32000, qwen-code sends 32000 to /v1/chat/completions:
    each route cuts it to what the context leaves and ends when the context fills."""
    context = httpx.post(f"{tiny_server.url}/tokenize", json={"prompt": "x"}, timeout=30)
    max_model_len = context.json()["max_model_len"]
    body = {"model": TINY_NAME, "max_tokens": 32000, "messages": MESSAGES, "temperature": 0}
    answer = httpx.post(f"{tiny_server.url}/v1/messages", json=body, timeout=300).json()
    usage = answer["usage"]
    prompt = sum(usage[f"{part}input_tokens"] for part in ("", "cache_creation_", "cache_read_"))
    assert answer["stop_reason"] == "max_tokens"
    assert prompt + usage["output_tokens"] == max_model_len
    openai = httpx.post(f"{tiny_server.url}/v1/chat/completions", json=body, timeout=300)
    assert openai.status_code == 200, openai.text
    choice, usage = openai.json()["choices"][0], openai.json()["usage"]
    assert choice["finish_reason"] == "length"
    assert usage["total_tokens"] == max_model_len
