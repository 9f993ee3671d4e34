"""One request's life through the real gateway app and a scripted worker on a real socket:
streamed and non-streamed answers fold the same events; rejections, disconnects, silent
workers and the drain's cut all end the request and give back what it held."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from common.errors import RejectCode
from common.schemas import Accepted, Finished, Message, Rejected, Submit, Tokens
from common.token_output import FinishReason, TokenLogprob, TopLogprob
from tests.gateway.in_process import call_and_leave, in_process, sse_data, until
from tests.gateway.scripted_worker import ScriptedWorker

CHAT = [{"role": "user", "content": "Say hello."}]
ROUTES = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
HELLO_TOP = (TopLogprob(11, "Hel", -0.25), TopLogprob(12, "Hi", -1.5))
HELLO_LOGPROBS = [TokenLogprob(11, "Hel", -0.25, HELLO_TOP)]


def body(protocol: str, stream: bool, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"model": "scripted", "messages": CHAT, "stream": stream}
    fields.update(max_tokens=8, **extra)
    if protocol == "openai" and stream:
        fields["stream_options"] = {"include_usage": True}
    return fields


def hello(submit: Submit) -> list[Message]:
    """Accepted, 'Hel' + 'lo' in two messages, then a stop: 2 tokens, 3 of 7 prompt cached."""
    rid = submit.request_id
    return [
        Accepted(rid, prompt_tokens=7),
        Tokens(rid, 0, "Hel", [11], logprobs=HELLO_LOGPROBS),
        Tokens(rid, 0, "lo", [12]),
        Finished(
            rid,
            0,
            FinishReason.STOP,
            prompt_tokens=7,
            completion_tokens=2,
            cached_tokens=3,
            cache_written_tokens=2,
        ),
    ]


def started(submit: Submit) -> list[Message]:
    """Accepted and a first token; the rest never comes."""
    rid = submit.request_id
    return [Accepted(rid, prompt_tokens=7), Tokens(rid, 0, "Hel", [11])]


def rejected(submit: Submit) -> list[Message]:
    return [Rejected(submit.request_id, RejectCode.CONTEXT_LENGTH_EXCEEDED, "too long", "messages")]


def openai_stream(text: str) -> dict[str, Any]:
    """A chat stream folded by hand: its text, finish reason, logprobs and usage."""
    payloads = sse_data(text)
    assert payloads[-1] == "[DONE]"
    chunks = payloads[:-1]
    choices = [choice for chunk in chunks for choice in chunk["choices"]]
    return {
        "text": "".join(c["delta"].get("content", "") for c in choices),
        "finish_reason": [c["finish_reason"] for c in choices if c["finish_reason"]],
        "logprobs": [e for c in choices if c["logprobs"] for e in c["logprobs"]["content"]],
        "usage": chunks[-1]["usage"],
    }


def anthropic_stream(text: str) -> dict[str, Any]:
    events = sse_data(text)
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    [message_delta] = [e for e in events if e["type"] == "message_delta"]
    assert events[-1] == {"type": "message_stop"}
    return {
        "text": "".join(d["text"] for d in deltas),
        "stop_reason": message_delta["delta"]["stop_reason"],
        "usage": message_delta["usage"],
    }


async def test_openai_stream_and_non_stream_fold_the_same_events():
    async with in_process(hello) as run:
        route = ROUTES["openai"]
        logprobs = {"logprobs": True, "top_logprobs": 2}
        whole = await run.client.post(route, json=body("openai", False, **logprobs))
        streamed = await run.client.post(route, json=body("openai", True, **logprobs))
        assert whole.status_code == streamed.status_code == 200
        [choice] = whole.json()["choices"]
        folded = openai_stream(streamed.text)
        assert choice["message"]["content"] == folded["text"] == "Hello"
        assert [choice["finish_reason"]] == folded["finish_reason"] == ["stop"]
        assert choice["logprobs"]["content"] == folded["logprobs"]
        assert [e["token"] for e in folded["logprobs"]] == ["Hel"]
        usage = {
            "prompt_tokens": 7,
            "completion_tokens": 2,
            "total_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 3},
        }
        assert whole.json()["usage"] == folded["usage"] == usage
        assert run.counted("openai", 200) == 2
        assert run.gateway.metrics.ttft_s.count == 2  # one first token each, one definition
        assert run.gateway.metrics.output_tokens == 4
        await run.assert_all_released()
        assert run.worker.aborts == []  # both ran to their end: nothing to abort


async def test_anthropic_stream_and_non_stream_fold_the_same_events():
    async with in_process(hello) as run:
        route = ROUTES["anthropic"]
        whole = await run.client.post(route, json=body("anthropic", False))
        streamed = await run.client.post(route, json=body("anthropic", True))
        assert whole.status_code == streamed.status_code == 200
        folded = anthropic_stream(streamed.text)
        assert whole.json()["content"] == [{"type": "text", "text": "Hello"}]
        assert folded["text"] == "Hello"
        assert whole.json()["stop_reason"] == folded["stop_reason"] == "end_turn"
        # The prompt's 7 tokens: 3 read from the cache, 2 computed into it, 2 neither.
        usage = {
            "input_tokens": 2,
            "cache_creation_input_tokens": 2,
            "cache_read_input_tokens": 3,
            "output_tokens": 2,
        }
        assert whole.json()["usage"] == folded["usage"] == usage
        assert run.counted("anthropic", 200) == 2
        await run.assert_all_released()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_rejection_is_the_protocols_error(stream: bool):
    async with in_process(rejected) as run:
        openai = await run.client.post(ROUTES["openai"], json=body("openai", stream))
        assert openai.status_code == 400
        assert openai.json() == {
            "error": {
                "message": "too long",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
        anthropic = await run.client.post(ROUTES["anthropic"], json=body("anthropic", stream))
        assert anthropic.status_code == 400
        assert anthropic.json() == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "too long"},
        }
        assert run.counted("openai", 400) == run.counted("anthropic", 400) == 1
        assert len(run.worker.submits) == 2  # a refusal is not retried elsewhere
        await run.assert_all_released()


async def test_a_draining_worker_is_replaced_by_another():
    def draining(submit: Submit) -> list[Message]:
        return [Rejected(submit.request_id, RejectCode.DRAINING, "shutting down")]

    async with in_process(draining, hello) as run:
        response = await run.client.post(ROUTES["openai"], json=body("openai", False))
        assert response.status_code == 200
        assert response.json()["choices"][0]["message"]["content"] == "Hello"
        assert run.gateway.metrics.retries == 1
        assert [len(w.submits) for w in run.workers] == [1, 1]
        await run.assert_all_released()


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_leaves_aborts_its_request_and_frees_its_slot(
    protocol: str, stream: bool
):
    async with in_process(started) as run:
        worker = run.worker

        def after_first_token(chunks: list[bytes]) -> bool:
            # A stream leaves once its first text arrived; a non-streamed request once the
            # worker has sent its first token (its answer never comes).
            return any(b"Hel" in c for c in chunks) if stream else worker.answered == 1

        sent = await call_and_leave(
            run.app, ROUTES[protocol], body(protocol, stream), after_first_token
        )
        [submit] = worker.submits
        await until(lambda: worker.aborts == [submit.request_id])
        await run.assert_all_released()
        assert run.counted(protocol, 499) == 1
        status = [m["status"] for m in sent if m["type"] == "http.response.start"]
        assert status == ([200] if stream else [499])  # what nobody reads, as nginx counts it
        await asyncio.sleep(0.1)
        assert worker.aborts == [submit.request_id]  # once


@pytest.mark.parametrize("stream", [False, True])
async def test_a_worker_that_falls_silent_ends_the_request_with_an_error(stream: bool):
    # A queue timeout shorter than the silence: no wait for a worker that never comes.
    async with in_process(started, falls_silent=True, queue_timeout_s=0.5) as run:
        response = await asyncio.wait_for(
            run.client.post(ROUTES["openai"], json=body("openai", stream)), 10
        )
        error = {
            "message": "worker lost: the worker stopped responding",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        if stream:
            assert response.status_code == 200  # sent before the worker fell silent
            payloads = sse_data(response.text)
            assert payloads[-2:] == [{"error": error}, "[DONE]"]
            assert openai_stream_text(payloads) == "Hel"
        else:  # no other worker to take it again
            assert response.status_code == 503
            error["message"] += "; no worker of model 'scripted' could take it"
            assert response.json() == {"error": error}
        assert run.counted("openai", 503) == 1
        assert run.gateway.registry.live() == []
        await run.assert_all_released()


async def test_the_drains_cut_ends_a_stream_with_the_protocols_error():
    async with in_process(started) as run:
        request = asyncio.ensure_future(
            run.client.post(ROUTES["anthropic"], json=body("anthropic", True))
        )
        await until(lambda: run.worker.answered == 1)
        assert await run.gateway.hub.cut_all("the server is shutting down") == 1
        response = await asyncio.wait_for(request, 10)
        last = response.text.strip().splitlines()[-2:]
        assert last[0] == "event: error"
        assert json.loads(last[1].removeprefix("data: ")) == {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "the server is shutting down"},
        }
        [submit] = run.worker.submits
        await until(lambda: run.worker.aborts == [submit.request_id])  # the cut's
        await run.assert_all_released()
        assert run.counted("anthropic", 503) == 1
        await asyncio.sleep(0.1)
        assert run.worker.aborts == [submit.request_id]  # the release knows it was cut


def openai_stream_text(payloads: list[Any]) -> str:
    chunks = [p for p in payloads if isinstance(p, dict) and "choices" in p]
    return "".join(c["delta"].get("content", "") for p in chunks for c in p["choices"])


def accepted_only(submit: Submit) -> list[Message]:
    """Accepted, and nothing more: the request waits in the worker's queue."""
    return [Accepted(submit.request_id, prompt_tokens=7)]


async def test_a_non_streamed_answer_whose_worker_is_lost_is_answered_by_another():
    # scripted-0 is picked first (least loaded, then by id); it sends "Hel" and falls silent.
    async with in_process(started, hello, falls_silent=[True, False]) as run:
        response = await asyncio.wait_for(
            run.client.post(ROUTES["openai"], json=body("openai", False)), 10
        )
        assert response.status_code == 200
        answer = response.json()
        assert answer["choices"][0]["message"]["content"] == "Hello"  # nothing of the lost "Hel"
        assert answer["usage"]["completion_tokens"] == 2
        [first], [again] = run.workers[0].submits, run.workers[1].submits
        assert first.request_id == again.request_id
        assert run.gateway.metrics.retries == 1
        assert [w.worker_id for w in run.gateway.registry.live()] == ["scripted-1"]
        assert run.counted("openai", 200) == 1
        await run.assert_all_released()


async def test_a_stream_whose_worker_is_lost_before_its_first_token_goes_on_elsewhere():
    async with in_process(accepted_only, hello, falls_silent=[True, False]) as run:
        response = await asyncio.wait_for(
            run.client.post(ROUTES["anthropic"], json=body("anthropic", True)), 10
        )
        assert response.status_code == 200
        assert "event: error" not in response.text
        deltas = [
            json.loads(line.removeprefix("data: "))["delta"].get("text", "")
            for line in response.text.splitlines()
            if line.startswith("data: ") and '"content_block_delta"' in line
        ]
        assert "".join(deltas) == "Hello"
        assert len(run.workers[1].submits) == 1
        assert run.counted("anthropic", 200) == 1
        await run.assert_all_released()


async def test_a_stream_that_sent_tokens_is_not_started_over():
    async with in_process(started, hello, falls_silent=[True, False]) as run:
        response = await asyncio.wait_for(
            run.client.post(ROUTES["openai"], json=body("openai", True)), 10
        )
        payloads = sse_data(response.text)
        assert openai_stream_text(payloads) == "Hel"
        assert payloads[-2]["error"]["message"] == "worker lost: the worker stopped responding"
        assert run.workers[1].submits == []  # the client had "Hel": no second answer
        assert run.gateway.metrics.retries == 0
        await run.assert_all_released()


async def test_a_request_while_no_worker_is_live_waits_for_one_and_is_answered():
    """As while the only worker restarts: the request is answered once a worker registers,
    within the queue timeout, not refused with a 503."""
    async with in_process(hello, queue_timeout_s=10) as run:
        [worker] = run.workers
        worker.stop()
        await until(lambda: run.gateway.registry.live() == [])
        request = asyncio.ensure_future(
            run.client.post(ROUTES["openai"], json=body("openai", False))
        )
        await asyncio.sleep(0.5)
        assert not request.done()  # waiting, not refused
        replacement = ScriptedWorker(run.gateway.config.worker_bind, hello, "scripted-0")
        replacement.start()
        try:
            response = await asyncio.wait_for(request, 10)
            assert response.status_code == 200
            assert response.json()["choices"][0]["message"]["content"] == "Hello"
            assert len(replacement.submits) == 1
        finally:
            replacement.stop()
        await run.assert_all_released()


async def test_a_request_that_waits_past_its_queue_timeout_for_a_worker_gets_a_503():
    async with in_process(hello, queue_timeout_s=0.5) as run:
        run.workers[0].stop()
        await until(lambda: run.gateway.registry.live() == [])
        asked = time.monotonic()
        response = await asyncio.wait_for(
            run.client.post(ROUTES["openai"], json=body("openai", False)), 10
        )
        assert response.status_code == 503
        assert response.json()["error"]["message"] == "no worker is ready; try again shortly"
        assert time.monotonic() - asked >= 0.5  # it waited its queue timeout for one first
        assert run.counted("openai", 503) == 1
        await run.assert_all_released()
