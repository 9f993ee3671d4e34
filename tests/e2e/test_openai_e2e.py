"""OpenAI protocol end to end: the official SDK against `astrai serve` on a tiny model."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import TINY_NAME
from tests.e2e.harness import Server, wait_until

pytestmark = pytest.mark.slow  # real processes (`astrai serve` and more)

MESSAGES = [{"role": "user", "content": "Tell me something."}]


@pytest.fixture(scope="module")
def client(tiny_server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{tiny_server.url}/v1", api_key="unused", max_retries=0)


def test_models_lists_the_served_model(client: openai.OpenAI):
    assert [m.id for m in client.models.list().data] == [TINY_NAME]


def test_non_stream_completion_shape_and_usage(client: openai.OpenAI):
    reply = client.chat.completions.create(
        model=TINY_NAME,
        messages=MESSAGES,
        max_tokens=6,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    assert reply.model == TINY_NAME
    [choice] = reply.choices
    assert choice.finish_reason == "length" and choice.message.role == "assistant"
    assert reply.usage.completion_tokens == 6
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 6


def test_model_may_be_omitted_when_one_is_served(tiny_server: Server):
    body = {"messages": MESSAGES, "max_tokens": 2, "temperature": 0}
    response = httpx.post(f"{tiny_server.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200
    assert response.json()["model"] == TINY_NAME


def test_every_sampling_parameter_is_accepted(client: openai.OpenAI):
    reply = client.chat.completions.create(
        model=TINY_NAME,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}]},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "Again."},
        ],
        max_completion_tokens=5,
        temperature=0.8,
        top_p=0.9,
        n=2,
        seed=11,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        logprobs=True,
        top_logprobs=3,
        stop=["\n\n\n"],
        extra_body={"top_k": 20, "min_tokens": 5, "ignore_eos": True},
    )
    assert [c.index for c in reply.choices] == [0, 1]
    for choice in reply.choices:
        assert choice.finish_reason == "length"
        assert len(choice.logprobs.content) == 5
        assert all(len(entry.top_logprobs) == 3 for entry in choice.logprobs.content)
    assert reply.usage.completion_tokens == 10


def test_seed_makes_sampling_repeatable(client: openai.OpenAI):
    def once() -> str:
        reply = client.chat.completions.create(
            model=TINY_NAME,
            messages=MESSAGES,
            max_tokens=12,
            temperature=1.0,
            seed=1234,
            extra_body={"ignore_eos": True},
        )
        return reply.choices[0].message.content

    assert once() == once()


def test_stop_string_truncates_and_reports_stop(client: openai.OpenAI):
    full = (
        client.chat.completions.create(
            model=TINY_NAME,
            messages=MESSAGES,
            max_tokens=16,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        .choices[0]
        .message.content
    )
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    assert stop
    reply = client.chat.completions.create(
        model=TINY_NAME,
        messages=MESSAGES,
        max_tokens=16,
        temperature=0,
        stop=stop,
        extra_body={"ignore_eos": True},
    )
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.content == full[: full.index(stop)]


def test_sdk_stream_with_usage(client: openai.OpenAI):
    chunks = list(
        client.chat.completions.create(
            model=TINY_NAME,
            messages=MESSAGES,
            max_tokens=4,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    whole = client.chat.completions.create(
        model=TINY_NAME,
        messages=MESSAGES,
        max_tokens=4,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert streamed == whole.choices[0].message.content


def test_exact_sse_event_sequence(tiny_server: Server):
    body = {
        "model": TINY_NAME,
        "messages": MESSAGES,
        "max_tokens": 3,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    with httpx.stream(
        "POST", f"{tiny_server.url}/v1/chat/completions", json=body, timeout=60
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in events[:-1]]
    shapes = [
        (
            "usage"
            if not c["choices"]
            else "role"
            if "role" in c["choices"][0]["delta"]
            else "finish"
            if c["choices"][0]["finish_reason"]
            else "content"
        )
        for c in chunks
    ]
    assert shapes[0] == "role" and shapes[-2:] == ["finish", "usage"]
    assert set(shapes[1:-2]) <= {"content"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[-1]["usage"]["completion_tokens"] == 3


def _vllm_gauge(url: str, name: str) -> float | None:
    """The one worker's sample of a vllm:* gauge in /metrics, or None while it has none."""
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        if family.name == name and family.samples:
            [sample] = family.samples
            assert sample.labels["model_name"] == "SmolLM2-135M-Instruct"
            return float(sample.value)
    return None


def test_vllm_compatibility_gauges_follow_a_running_request(default_server: Server):
    """On the default model (the tiny one finishes a stream between two heartbeats)."""
    body = {"messages": MESSAGES, "max_tokens": 1000, "ignore_eos": True, "stream": True}
    url = default_server.url
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
        # Kept: a dropped line iterator closes the stream, and the gateway aborts the request.
        lines = response.iter_lines()
        next(lines)  # streaming: the request runs on the worker now
        # Within a heartbeat or two, the worker's report shows it.
        assert wait_until(lambda: _vllm_gauge(url, "vllm:num_requests_running") == 1, 10)
        usage = _vllm_gauge(url, "vllm:kv_cache_usage_perc")
        assert usage is not None and 0 < usage <= 1
        assert _vllm_gauge(url, "vllm:num_requests_waiting") == 0
        lines.close()
    # The client went away: the request is aborted and its pages freed.
    assert wait_until(lambda: _vllm_gauge(url, "vllm:num_requests_running") == 0, 10)
    assert wait_until(lambda: _vllm_gauge(url, "vllm:kv_cache_usage_perc") == 0, 10)
