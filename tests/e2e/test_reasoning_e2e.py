"""A reasoning model through `astrai serve`: real processes, real HTTP, the official SDKs.

The model is a tiny Qwen3 with Qwen3's chat template whose weights make greedy decoding
write `<think>Let me think</think>Hello!` (tests/worker/reasoning_model.py); the worker
reads the template, parses the tags, and every protocol gives the thoughts back as
reasoning, apart from the answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.e2e.harness import Server
from tests.worker.reasoning_model import ANSWER, REASONING, build_reasoning_model

pytestmark = pytest.mark.slow
MODEL = "qwen3-thinks"
HI = [{"role": "user", "content": "Hi"}]
GREEDY = {"temperature": 0, "max_tokens": 16}
GREEDY_ANTHROPIC = {"temperature": 0}  # recent SDKs dropped the sampling arguments


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Path:
    return build_reasoning_model(tmp_path_factory.mktemp("reasoning") / MODEL, default_model_dir)


def serve(model_dir: Path, *flags: str) -> Server:
    return Server(
        "serve", "--model", str(model_dir), "--dtype", "float32", "--kv-cache-mb", "16", *flags
    ).wait_ready()


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[Server]:
    running = serve(model_dir)
    try:
        yield running
    finally:
        running.stop()


def openai_client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def anthropic_client(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)


def test_chat_completions_give_the_thoughts_as_reasoning(server: Server):
    client = openai_client(server)
    reply = client.chat.completions.create(model=MODEL, messages=HI, **GREEDY)
    message = reply.choices[0].message
    assert (message.content, reply.choices[0].finish_reason) == (ANSWER, "stop")
    assert message.model_extra == {"reasoning_content": REASONING, "reasoning": REASONING}
    reasoning = content = ""
    for chunk in client.chat.completions.create(model=MODEL, messages=HI, stream=True, **GREEDY):
        delta = chunk.choices[0].delta
        assert not (delta.content and delta.model_extra.get("reasoning_content"))
        assert not (content and delta.model_extra.get("reasoning_content")), "reasoning came late"
        reasoning += delta.model_extra.get("reasoning_content") or ""
        content += delta.content or ""
    assert (reasoning, content) == (REASONING, ANSWER)


def test_enable_thinking_false_answers_without_reasoning(server: Server):
    reply = openai_client(server).chat.completions.create(
        model=MODEL,
        messages=HI,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        **GREEDY,
    )
    message = reply.choices[0].message
    assert (message.content, message.model_extra) == (ANSWER, {})
    # The template rendered the empty reasoning Qwen3 writes when thinking is off.
    on = httpx.post(f"{server.url}/tokenize", json={"messages": HI}).json()["count"]
    assert reply.usage.prompt_tokens > on


def test_a_budget_spent_inside_the_reasoning_is_all_reasoning(server: Server):
    body = {"model": MODEL, "messages": HI, "temperature": 0, "max_tokens": 3}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body).json()
    message = reply["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("Let me", "")
    assert reply["choices"][0]["finish_reason"] == "length"


def test_responses_give_a_reasoning_item_before_the_message(server: Server):
    client = openai_client(server)
    response = client.responses.create(model=MODEL, input="Hi", temperature=0, max_output_tokens=16)
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert [c.text for c in response.output[0].content or []] == [REASONING]
    assert response.output_text == ANSWER
    with client.responses.stream(model=MODEL, input="Hi", temperature=0) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_response()
    assert events.index("response.reasoning_text.done") < events.index("response.output_text.delta")
    assert [item.type for item in final.output] == ["reasoning", "message"]
    # The stored response continues with its reasoning as the assistant turn's.
    later = client.responses.create(
        model=MODEL, input="Again", previous_response_id=response.id, temperature=0
    )
    assert later.output_text == ANSWER


def test_anthropic_messages_give_a_thinking_block(server: Server):
    client = anthropic_client(server)
    message = client.messages.create(
        model=MODEL, max_tokens=16, messages=HI, extra_body=GREEDY_ANTHROPIC
    )
    assert [block.type for block in message.content] == ["thinking", "text"]
    thinking, text = message.content
    assert thinking.thinking == REASONING and thinking.signature
    assert text.text == ANSWER
    with client.messages.stream(
        model=MODEL, max_tokens=16, messages=HI, extra_body=GREEDY_ANTHROPIC
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert [block.model_dump() for block in final.content] == [
        block.model_dump() for block in message.content
    ]
    # The SDK's own events: thinking deltas, the signature, then the text.
    assert kinds.index("thinking") < kinds.index("signature") < kinds.index("text")
    # The thinking block goes back in as the turn's reasoning, and disabled thinking means
    # the template renders it off.
    turn = {"role": "assistant", "content": [block.model_dump() for block in message.content]}
    again = client.messages.create(
        model=MODEL,
        max_tokens=16,
        messages=[*HI, turn, *HI],
        extra_body=GREEDY_ANTHROPIC,
        thinking={"type": "disabled"},
    )
    assert [(block.type, getattr(block, "text", None)) for block in again.content] == [
        ("text", ANSWER)
    ]


def test_the_parser_can_be_turned_off(model_dir: Path):
    running = serve(model_dir, "--reasoning-parser", "none")
    try:
        reply = openai_client(running).chat.completions.create(model=MODEL, messages=HI, **GREEDY)
    finally:
        running.stop()
    message = reply.choices[0].message
    assert message.content == f"<think>{REASONING}</think>{ANSWER}"
    assert message.model_extra == {}
