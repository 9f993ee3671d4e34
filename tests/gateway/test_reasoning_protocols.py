"""A reasoning model's answers on every protocol, through the real gateway app and a scripted
worker whose text is split by the worker's own parsers: chat `reasoning_content` and
`reasoning`, Responses reasoning items, Anthropic thinking blocks; streamed and not, read back
by the official SDKs; earlier reasoning on input under every name."""

from __future__ import annotations

import json
from collections.abc import Callable

import anthropic
import httpx
import openai
import pytest

from common.schemas import Accepted, Finished, Message, Submit, Tokens
from common.token_output import FinishReason
from tests.gateway.in_process import InProcess, in_process, sse_data
from tests.gateway.test_responses_routes import named_events
from worker.text.reasoning_parser import ReasoningParser, ReasoningTags
from worker.text.tool_parser import ToolCallParser

# Tags split across pieces, as tokens arrive.
THINKS = ["<thi", "nk>\nI should", " greet.\n</th", "ink>\n\nHel", "lo!"]
REASONING, ANSWER = "I should greet.", "Hello!"
CALLS = ["<think>\nUse f.\n</think>\n\n", '<tool_call>{"name":"f","arguments":', '{"x":1}}']
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
HI = [{"role": "user", "content": "Hi"}]


def worker_output(pieces: list[str], finish: FinishReason = FinishReason.STOP) -> Callable:
    """A script that answers `pieces` as a worker does: reasoning parsed out first, tool
    calls out of the rest (when the request has tools), one token a piece."""

    def script(submit: Submit) -> list[Message]:
        rid = submit.request_id
        reasoning = ReasoningParser(ReasoningTags())
        tools = ToolCallParser() if submit.params.tools else None
        replies: list[Message] = [Accepted(rid, prompt_tokens=5)]
        for i, piece in enumerate(pieces):
            thought, text = reasoning.feed(piece)
            if i == len(pieces) - 1:
                held_thought, held_text = reasoning.flush()
                thought, text = thought + held_thought, text + held_text
            calls = []
            if tools is not None:
                text, calls = tools.feed(text)
            replies.append(
                Tokens(rid, 0, text, [100 + i], tool_calls=calls or None, reasoning=thought)
            )
        ended = FinishReason.TOOL_CALLS if tools is not None and tools.num_calls else finish
        replies.append(Finished(rid, 0, ended, 5, len(pieces), 0))
        return replies

    return script


def openai_client(run: InProcess) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=run.app), base_url="http://gateway")
    return openai.AsyncOpenAI(base_url="http://gateway/v1", api_key="x", http_client=http)


def anthropic_client(run: InProcess) -> anthropic.AsyncAnthropic:
    import httpx2  # the anthropic SDK's own fork of httpx

    http = httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=run.app), base_url="http://gateway"
    )
    return anthropic.AsyncAnthropic(base_url="http://gateway", api_key="x", http_client=http)


# -- chat completions -----------------------------------------------------------------------


async def test_chat_message_carries_the_reasoning_under_both_names():
    async with in_process(worker_output(THINKS)) as run:
        reply = await openai_client(run).chat.completions.create(model="scripted", messages=HI)
        message = reply.choices[0].message
        assert message.content == ANSWER
        assert message.model_extra == {"reasoning_content": REASONING, "reasoning": REASONING}
        assert reply.choices[0].finish_reason == "stop"
        await run.assert_all_released()


async def test_chat_stream_sends_the_reasoning_deltas_before_the_content():
    async with in_process(worker_output(THINKS)) as run:
        stream = await openai_client(run).chat.completions.create(
            model="scripted", messages=HI, stream=True
        )
        deltas = [chunk.choices[0].delta async for chunk in stream if chunk.choices]
        kinds = [
            ("reasoning", d.model_extra["reasoning_content"])
            if d.model_extra.get("reasoning_content")
            else ("content", d.content)
            for d in deltas
            if d.content or (d.model_extra or {}).get("reasoning_content")
        ]
        assert kinds == [
            ("reasoning", "I should"),
            ("reasoning", " greet."),
            ("content", "Hel"),
            ("content", "lo!"),
        ]
        assert all(
            d.model_extra.get("reasoning") == d.model_extra.get("reasoning_content") for d in deltas
        )


async def test_chat_tool_calls_are_parsed_from_what_follows_the_reasoning():
    async with in_process(worker_output(CALLS)) as run:
        body = {"model": "scripted", "messages": HI, "tools": TOOLS}
        reply = (await run.client.post("/v1/chat/completions", json=body)).json()
        [choice] = reply["choices"]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["reasoning_content"] == "Use f."
        assert choice["message"]["content"] is None
        [call] = choice["message"]["tool_calls"]
        assert (call["function"]["name"], call["function"]["arguments"]) == ("f", '{"x":1}')


async def test_chat_cut_inside_the_reasoning_is_all_reasoning():
    async with in_process(worker_output(THINKS[:2], FinishReason.LENGTH)) as run:
        body = {"model": "scripted", "messages": HI, "max_tokens": 2}
        reply = (await run.client.post("/v1/chat/completions", json=body)).json()
        message = reply["choices"][0]["message"]
        assert (message["reasoning_content"], message["content"]) == ("I should", "")
        assert reply["choices"][0]["finish_reason"] == "length"


async def test_a_model_without_reasoning_has_no_reasoning_fields():
    async with in_process(worker_output(["Hello", "!"])) as run:
        body = {"model": "scripted", "messages": HI}
        reply = (await run.client.post("/v1/chat/completions", json=body)).json()
        assert reply["choices"][0]["message"] == {"role": "assistant", "content": ANSWER}
        streamed = await run.client.post("/v1/chat/completions", json={**body, "stream": True})
        assert "reasoning" not in streamed.text


async def test_chat_takes_earlier_reasoning_under_both_names_and_template_variables():
    async with in_process(worker_output(THINKS)) as run:
        messages = [
            *HI,
            {"role": "assistant", "content": "a", "reasoning_content": "r1"},
            *HI,
            {"role": "assistant", "content": "b", "reasoning": "r2"},
            *HI,
        ]
        body = {
            "model": "scripted",
            "messages": messages,
            "chat_template_kwargs": {"enable_thinking": False},
        }
        assert (await run.client.post("/v1/chat/completions", json=body)).status_code == 200
        submit = run.worker.submits[0]
        assistant = [m for m in submit.messages if m["role"] == "assistant"]
        assert [m.get("reasoning_content") for m in assistant] == ["r1", "r2"]
        assert submit.params.chat_template_kwargs == {"enable_thinking": False}


@pytest.mark.parametrize(
    ("change", "param", "message"),
    [
        (
            {"messages": [*HI, {"role": "assistant", "content": "a", "reasoning_content": 5}]},
            "messages.1.reasoning_content",
            "messages.1.reasoning_content must be a string, got integer",
        ),
        (
            {"messages": [*HI, {"role": "assistant", "content": "a", "reasoning": ["x"]}]},
            "messages.1.reasoning",
            "messages.1.reasoning must be a string, got array",
        ),
        (
            {"chat_template_kwargs": "off"},
            "chat_template_kwargs",
            "chat_template_kwargs must be an object",
        ),
        (
            {"chat_template_kwargs": {"add_generation_prompt": False}},
            "chat_template_kwargs",
            'chat_template_kwargs may not set "add_generation_prompt"',
        ),
    ],
)
async def test_bad_reasoning_fields_are_400s_naming_them(change: dict, param: str, message: str):
    async with in_process(worker_output(THINKS)) as run:
        body = {"model": "scripted", "messages": HI, **change}
        reply = await run.client.post("/v1/chat/completions", json=body)
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert error["param"] == param and error["message"].startswith(message)
        assert run.worker.submits == []


# -- Responses ------------------------------------------------------------------------------


async def test_responses_put_a_reasoning_item_before_the_message():
    async with in_process(worker_output(THINKS)) as run:
        response = await openai_client(run).responses.create(model="scripted", input="Hi")
        reasoning, message = response.output
        assert isinstance(reasoning, openai.types.responses.ResponseReasoningItem)
        assert reasoning.summary == [] and reasoning.status == "completed"
        assert [(c.type, c.text) for c in reasoning.content or []] == [
            ("reasoning_text", REASONING)
        ]
        assert message.type == "message" and response.output_text == ANSWER


async def test_responses_stream_reasoning_events_in_order_numbered_without_gaps():
    async with in_process(worker_output(THINKS)) as run:
        body = {"model": "scripted", "input": "Hi", "stream": True}
        events = named_events((await run.client.post("/v1/responses", json=body)).text)
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert [e["type"] for e in events] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.reasoning_text.delta",
            "response.reasoning_text.delta",
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
        assert [e["delta"] for e in events if e["type"].endswith(".delta")] == [
            "I should",
            " greet.",
            "Hel",
            "lo!",
        ]
        rs_id = events[2]["item"]["id"]
        assert {e["item_id"] for e in events[3:8]} == {rs_id}
        assert events[6]["text"] == REASONING
        assert events[8]["item"]["content"] == [{"type": "reasoning_text", "text": REASONING}]
        assert events[9]["output_index"] == 1


async def test_the_sdks_responses_stream_folds_the_same_reasoning():
    async with in_process(worker_output(THINKS)) as run:
        async with openai_client(run).responses.stream(model="scripted", input="Hi") as stream:
            deltas = [e.delta async for e in stream if e.type == "response.reasoning_text.delta"]
            final = await stream.get_final_response()
        assert "".join(deltas) == REASONING
        assert [item.type for item in final.output] == ["reasoning", "message"]
        assert final.output_text == ANSWER


async def test_responses_cut_inside_the_reasoning_leave_an_incomplete_reasoning_item():
    async with in_process(worker_output(THINKS[:2], FinishReason.LENGTH)) as run:
        body = {"model": "scripted", "input": "Hi", "max_output_tokens": 2}
        response = (await run.client.post("/v1/responses", json=body)).json()
        assert response["status"] == "incomplete"
        [item] = response["output"]
        assert item["type"] == "reasoning" and item["status"] == "incomplete"
        assert item["content"] == [{"type": "reasoning_text", "text": "I should"}]


async def test_responses_reasoning_round_trips_as_the_assistant_turns_reasoning():
    async with in_process(worker_output(THINKS)) as run:
        first = (
            await run.client.post("/v1/responses", json={"model": "scripted", "input": "Hi"})
        ).json()
        later = {"model": "scripted", "input": "Again", "previous_response_id": first["id"]}
        assert (await run.client.post("/v1/responses", json=later)).status_code == 200
        items = [
            *first["output"],
            {"role": "user", "content": "Again"},
        ]
        by_items = {"model": "scripted", "input": [{"role": "user", "content": "Hi"}, *items]}
        assert (await run.client.post("/v1/responses", json=by_items)).status_code == 200
        stored, explicit = run.worker.submits[1].messages, run.worker.submits[2].messages
        assistant = {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING}
        assert stored == explicit == [HI[0], assistant, {"role": "user", "content": "Again"}]


async def test_a_bad_reasoning_item_is_a_400_naming_it():
    async with in_process(worker_output(THINKS)) as run:
        item = {
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": 3}],
        }
        body = {"model": "scripted", "input": [*HI, item]}
        reply = await run.client.post("/v1/responses", json=body)
        assert reply.status_code == 400
        assert reply.json()["error"]["param"] == "input.1.content.0.text"


# -- Anthropic ------------------------------------------------------------------------------

ANTHROPIC = {"model": "scripted", "max_tokens": 64, "messages": HI}


async def test_anthropic_message_starts_with_a_signed_thinking_block():
    async with in_process(worker_output(THINKS)) as run:
        message = await anthropic_client(run).messages.create(**ANTHROPIC)
        thinking, text = message.content
        assert isinstance(thinking, anthropic.types.ThinkingBlock)
        assert thinking.thinking == REASONING and len(thinking.signature) == 44
        assert isinstance(text, anthropic.types.TextBlock) and text.text == ANSWER
        assert message.stop_reason == "end_turn"


async def test_anthropic_stream_closes_the_thinking_block_before_the_text_block():
    async with in_process(worker_output(THINKS)) as run:
        streamed = await run.client.post("/v1/messages", json={**ANTHROPIC, "stream": True})
        events = [
            (e["type"], e.get("index"), e.get("delta", {}).get("type"))
            for e in sse_data(streamed.text)
        ]
        assert events == [
            ("message_start", None, None),
            ("content_block_start", 0, None),
            ("content_block_delta", 0, "thinking_delta"),
            ("content_block_delta", 0, "thinking_delta"),
            ("content_block_delta", 0, "signature_delta"),
            ("content_block_stop", 0, None),
            ("content_block_start", 1, None),
            ("content_block_delta", 1, "text_delta"),
            ("content_block_delta", 1, "text_delta"),
            ("content_block_stop", 1, None),
            ("message_delta", None, None),
            ("message_stop", None, None),
        ]
        async with anthropic_client(run).messages.stream(**ANTHROPIC) as stream:
            final = await stream.get_final_message()
        plain = await anthropic_client(run).messages.create(**ANTHROPIC)
        assert [b.model_dump() for b in final.content] == [b.model_dump() for b in plain.content]
        assert final.content[0].type == "thinking"


async def test_anthropic_tool_use_follows_the_thinking_block():
    async with in_process(worker_output(CALLS)) as run:
        tools = [{"name": "f", "input_schema": {"type": "object"}}]
        body = {**ANTHROPIC, "tools": tools}
        message = (await run.client.post("/v1/messages", json=body)).json()
        assert [b["type"] for b in message["content"]] == ["thinking", "tool_use"]
        assert message["content"][1]["input"] == {"x": 1}
        streamed = await run.client.post("/v1/messages", json={**body, "stream": True})
        starts = [
            e["content_block"]["type"]
            for e in sse_data(streamed.text)
            if e["type"] == "content_block_start"
        ]
        assert starts == ["thinking", "tool_use"]


async def test_anthropic_cut_inside_thinking_has_only_the_thinking_block():
    async with in_process(worker_output(THINKS[:2], FinishReason.LENGTH)) as run:
        message = (await run.client.post("/v1/messages", json=ANTHROPIC)).json()
        assert [b["type"] for b in message["content"]] == ["thinking"]
        assert message["stop_reason"] == "max_tokens"


async def test_anthropic_thinking_input_and_disabled_thinking_reach_the_worker():
    async with in_process(worker_output(THINKS)) as run:
        thought = {"type": "thinking", "thinking": "earlier", "signature": "x"}
        messages = [
            *HI,
            {"role": "assistant", "content": [thought, {"type": "text", "text": "a"}]},
            *HI,
        ]
        body = {**ANTHROPIC, "messages": messages, "thinking": {"type": "disabled"}}
        assert (await run.client.post("/v1/messages", json=body)).status_code == 200
        submit = run.worker.submits[0]
        assert submit.messages[1] == {
            "role": "assistant",
            "content": "a",
            "reasoning_content": "earlier",
        }
        assert submit.params.chat_template_kwargs == {"enable_thinking": False}


def test_the_signature_is_a_digest_of_the_thinking():
    from gateway.protocols.anthropic import signature

    assert signature("a") == signature("a") != signature("b")
    assert json.dumps(signature("a")).isascii()
