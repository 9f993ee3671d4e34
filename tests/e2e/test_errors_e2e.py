"""Bad input, limits and missing workers: clear errors in each protocol's shape, never a 5xx."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import TINY_NAME
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow  # real processes (`astrai serve` and more)

OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"
HELLO = [{"role": "user", "content": "Hello"}]
LONG_PROMPT = [{"role": "user", "content": "word " * 1500}]  # the tiny context is 1024


def post(server: Server, path: str, **kwargs) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", timeout=60, **kwargs)


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if param is not None:
        assert error["param"] == param
    return error


def assert_anthropic_error(response: httpx.Response, status: int, kind: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind
    assert body["error"]["message"]
    return body["error"]


OPENAI_BAD_BODIES = [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"messages": HELLO, "max_tokens": 2**64}, "max_tokens"),
    ({"messages": HELLO, "seed": 2**64}, "seed"),
    ({"messages": "hello"}, "messages"),
    ({"messages": HELLO, "temperature": "hot"}, "temperature"),
    ({"messages": HELLO, "temperature": 3}, "temperature"),
    ({"messages": HELLO, "top_p": 0}, "top_p"),
    ({"messages": HELLO, "max_tokens": 0}, "max_tokens"),
    ({"messages": HELLO, "max_tokens": True}, "max_tokens"),
    ({"messages": HELLO, "n": 0}, "n"),
    ({"messages": HELLO, "stop": 5}, "stop"),
    ({"messages": HELLO, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": HELLO, "stream": "yes"}, "stream"),
    ({"model": 5, "messages": HELLO}, "model"),
]


@pytest.mark.parametrize(("body", "param"), OPENAI_BAD_BODIES)
def test_openai_bad_parameters_are_400_naming_the_parameter(tiny_server: Server, body, param):
    error = assert_openai_error(post(tiny_server, OPENAI, json=body), 400, param)
    assert error["type"] == "invalid_request_error"


ANTHROPIC_BAD_BODIES = [
    {"model": TINY_NAME, "messages": HELLO},  # max_tokens is required
    {"model": TINY_NAME, "max_tokens": 5, "messages": []},
    {"model": TINY_NAME, "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]},
    {"model": TINY_NAME, "max_tokens": 5, "messages": HELLO, "temperature": 1.5},
    {"model": TINY_NAME, "max_tokens": 5, "messages": HELLO, "stop_sequences": "x"},
    {"max_tokens": 5, "messages": HELLO},  # model is required
]


@pytest.mark.parametrize("body", ANTHROPIC_BAD_BODIES)
def test_anthropic_bad_parameters_are_400(tiny_server: Server, body):
    assert_anthropic_error(post(tiny_server, ANTHROPIC, json=body), 400, "invalid_request_error")


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"[1, 2, 3]", b'"a string"', b"null", b'{"messages": "\xff\xfe"}', b""],
    ids=["malformed", "array", "string", "null", "invalid-utf8", "empty"],
)
def test_unparseable_bodies_are_400_in_both_shapes(tiny_server: Server, raw: bytes):
    headers = {"content-type": "application/json"}
    assert_openai_error(post(tiny_server, OPENAI, content=raw, headers=headers), 400)
    response = post(tiny_server, ANTHROPIC, content=raw, headers=headers)
    assert_anthropic_error(response, 400, "invalid_request_error")


def test_oversized_body_is_413(tiny_server: Server):
    huge = {"messages": [{"role": "user", "content": "x" * (9 * 1024 * 1024)}]}
    assert_openai_error(post(tiny_server, OPENAI, json=huge), 413)
    huge["model"], huge["max_tokens"] = TINY_NAME, 5
    assert_anthropic_error(post(tiny_server, ANTHROPIC, json=huge), 413, "request_too_large")


def test_unknown_model_is_404(tiny_server: Server):
    error = assert_openai_error(
        post(tiny_server, OPENAI, json={"model": "gpt-9", "messages": HELLO}), 404, "model"
    )
    assert error["code"] == "model_not_found"
    body = {"model": "claude-9", "max_tokens": 5, "messages": HELLO}
    assert_anthropic_error(post(tiny_server, ANTHROPIC, json=body), 404, "not_found_error")


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_over_the_context_is_400_before_any_stream_byte(tiny_server: Server, stream: bool):
    body = {"messages": LONG_PROMPT, "stream": stream}
    error = assert_openai_error(post(tiny_server, OPENAI, json=body), 400)
    assert error["code"] == "context_length_exceeded"
    body = {"model": TINY_NAME, "max_tokens": 5, "messages": LONG_PROMPT, "stream": stream}
    error = assert_anthropic_error(
        post(tiny_server, ANTHROPIC, json=body), 400, "invalid_request_error"
    )
    assert error["message"].startswith("prompt is too long:")
    assert "tokens >" in error["message"] and "maximum" in error["message"]


def test_after_all_of_that_the_server_still_answers(tiny_server: Server):
    for _ in range(3):
        post(tiny_server, OPENAI, content=b"\x00\x01", headers={"content-type": "application/json"})
    body = {"messages": HELLO, "max_tokens": 3, "temperature": 0}
    assert post(tiny_server, OPENAI, json=body).status_code == 200
    stats = tiny_server.stats()
    assert stats["num_workers"] == 1


@pytest.fixture(scope="module")
def bare_gateway() -> Iterator[Server]:
    """A gateway with an API key and no worker at all; requests wait 1 s for one."""
    server = Server("gateway", "--api-key", "s3cret", "--queue-timeout", "1")
    try:
        yield server.wait_ready(workers=0)
    finally:
        server.stop()


def test_health_is_open_and_503_without_workers(bare_gateway: Server):
    response = httpx.get(f"{bare_gateway.url}/health")
    assert response.status_code == 503 and response.json() == {"detail": "no worker is ready"}


def test_api_key_is_required_in_each_protocol_shape(bare_gateway: Server):
    error = assert_openai_error(post(bare_gateway, OPENAI, json={"messages": HELLO}), 401)
    assert error["type"] == "authentication_error"
    wrong = {"authorization": "Bearer nope"}
    assert_openai_error(post(bare_gateway, OPENAI, json={"messages": HELLO}, headers=wrong), 401)
    body = {"model": "m", "max_tokens": 5, "messages": HELLO}
    assert_anthropic_error(post(bare_gateway, ANTHROPIC, json=body), 401, "authentication_error")


@pytest.mark.parametrize(
    "headers",
    [{"authorization": "Bearer s3cret"}, {"x-api-key": "s3cret"}],
    ids=["bearer", "x-api-key"],
)
def test_no_worker_is_503_for_openai_and_529_for_anthropic(bare_gateway: Server, headers):
    response = post(bare_gateway, OPENAI, json={"messages": HELLO}, headers=headers)
    assert_openai_error(response, 503)
    body = {"model": "m", "max_tokens": 5, "messages": HELLO}
    response = post(bare_gateway, ANTHROPIC, json=body, headers=headers)
    assert_anthropic_error(response, 529, "overloaded_error")
