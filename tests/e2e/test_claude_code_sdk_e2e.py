"""Claude Code's captured first request replayed through the official SDK's beta client,
on a tiny long-context model (fast): count_tokens counts what the model sees, thinking and
context_management in the spec's meaning, and its max_tokens 32000 clamped to the context."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.conftest import TINY_NAME
from tests.e2e.harness import Server, build_tiny_model
from tests.e2e.sdk import prompt_tokens

pytestmark = pytest.mark.slow  # real processes (`astrai serve`)

FIXTURE = Path(__file__).parents[1] / "gateway" / "fixtures" / "claude_code_first_turn.json"
POSITIONS = 16384  # the tiny model's trained context: Claude Code's ~12.6k-token prompt fits
CONTEXT = 13312  # served: a few hundred tokens past that prompt, so a full context is quick


@pytest.fixture(scope="module")
def long_server(
    tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("tiny-long") / TINY_NAME
    model = build_tiny_model(folder, default_model_dir, max_positions=POSITIONS)
    server = Server(
        "serve",
        "--model",
        str(model),
        "--dtype",
        "float32",
        "--max-model-len",
        str(CONTEXT),
        "--served-model-name",
        TINY_NAME,
        "claude-*",
    )
    try:
        yield server.wait_ready()
    finally:
        server.stop()
        assert not server.group_alive()


def first_turn() -> tuple[dict[str, Any], list[str]]:
    """The captured first request as SDK arguments (its model a claude-* name), and its
    anthropic-beta values."""
    captured = json.loads(FIXTURE.read_text())
    body = {key: value for key, value in captured["body"].items() if key != "stream"}
    return {**body, "model": "claude-opus-5-5"}, captured["headers"]["anthropic-beta"].split(",")


def client_of(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)


def test_count_tokens_is_what_the_message_reads(long_server: Server):
    body, betas = first_turn()
    client = client_of(long_server)
    counted = client.beta.messages.count_tokens(
        **{k: v for k, v in body.items() if k not in ("max_tokens", "metadata")}, betas=betas
    )
    message = client.beta.messages.create(**{**body, "max_tokens": 2}, betas=betas)
    usage = message.usage
    assert counted.input_tokens == prompt_tokens(usage)
    assert 10000 < counted.input_tokens < CONTEXT
    assert message.model == TINY_NAME
    assert [block.type for block in message.content] == ["text"]  # no thinking blocks
    assert message.context_management is not None
    assert message.context_management.applied_edits == []


def test_the_stream_with_32000_max_tokens_ends_when_the_context_fills(long_server: Server):
    body, betas = first_turn()
    client = client_of(long_server)
    greedy = {"extra_body": {"temperature": 0}}  # this SDK release has no sampling arguments
    with client.beta.messages.stream(**body, **greedy, betas=betas) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert body["max_tokens"] == 32000
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    usage = final.usage
    prompt = prompt_tokens(usage)
    if final.stop_reason == "max_tokens":  # random weights: greedy rarely meets EOS
        assert prompt + usage.output_tokens == CONTEXT
    else:
        assert final.stop_reason == "end_turn" and prompt + usage.output_tokens < CONTEXT
    assert final.context_management is not None


def test_a_forced_call_to_one_of_its_tools_round_trips(long_server: Server):
    """Claude Code's own tools, the model made to call Read (tool_choice), its result sent
    back as Claude Code sends one: a tool_use block whose input fits Read's schema, then an
    answer to the tool_result."""
    body, betas = first_turn()
    client = client_of(long_server)
    greedy = {"extra_body": {"temperature": 0}}
    forced = {"type": "tool", "name": "Read"}
    call = client.beta.messages.create(
        **{**body, "max_tokens": 64}, tool_choice=forced, betas=betas, **greedy
    )
    assert call.stop_reason in ("tool_use", "max_tokens")
    (block,) = call.content
    assert (block.type, block.name) == ("tool_use", "Read")
    if call.stop_reason == "tool_use":  # complete: its input follows Read's schema
        assert isinstance(block.input["file_path"], str)
    result = {"type": "tool_result", "tool_use_id": block.id, "content": "1\tThe word is pumpkin."}
    messages = [
        *body["messages"],
        {"role": "assistant", "content": [block.model_dump(exclude_none=True)]},
        {"role": "user", "content": [result]},
    ]
    answer = client.beta.messages.create(
        **{**body, "messages": messages, "max_tokens": 4}, betas=betas, **greedy
    )
    assert answer.stop_reason in ("max_tokens", "end_turn", "tool_use")
    usage = answer.usage
    assert prompt_tokens(usage) > prompt_tokens(call.usage)
