"""What Claude Code 2.1.332 sends (captured from the binary, fixtures/) parses in the spec's
meaning: thinking, context edits, effort, system turns, deferred tools, and the 32000 max."""

import json
from pathlib import Path
from typing import Any

import pytest

from common.sampling_params import SamplingParams
from common.schemas import Accepted, Finished, Message, Submit, Tokens
from common.token_output import FinishReason
from gateway.errors import GatewayError
from gateway.protocols.anthropic import AnthropicResponseBuilder
from gateway.protocols.base import ChatRequest, ChatResult, ChoiceResult, StreamState
from tests.gateway.in_process import in_process
from tests.gateway.test_anthropic_protocol import events_of

FIXTURES = Path(__file__).parent / "fixtures"
BUILDER = AnthropicResponseBuilder()
FIRST = json.loads((FIXTURES / "claude_code_first_turn.json").read_text())
LATER = json.loads((FIXTURES / "claude_code_later_turns.json").read_text())
HELLO = [{"role": "user", "content": "hi"}]


def first_body(**fields: Any) -> dict[str, Any]:
    return {**FIRST["body"], **fields}


def texts(blocks: list[dict[str, Any]] | str) -> str:
    """A content's text as the gateway joins its blocks."""
    if isinstance(blocks, str):
        return blocks
    return "\n".join(block["text"] for block in blocks)


def test_the_fixture_is_what_claude_code_sends():
    body = FIRST["body"]
    assert FIRST["path"] == "/v1/messages?beta=true"
    assert body["thinking"] == {"type": "adaptive", "display": "omitted"}
    edits = [{"type": "clear_thinking_20251015", "keep": "all"}]
    assert body["context_management"] == {"edits": edits}
    assert body["output_config"] == {"effort": "high"}
    assert (body["max_tokens"], body["stream"]) == (32000, True)
    assert [m["role"] for m in body["messages"]] == ["user", "system"]
    assert [t["name"] for t in body["tools"] if t.get("defer_loading")] == [
        "DeferredToolPlaceholder"
    ]


def test_first_turn_renders_the_system_turn_where_it_stands():
    request = BUILDER.parse(FIRST["body"])
    body = FIRST["body"]
    billing, *system = body["system"]  # the billing line is dropped (anthropic_billing.py)
    assert billing["text"].startswith("x-anthropic-billing-header: cc_version=")
    assert request.messages == [
        {"role": "system", "content": texts(system)},
        {"role": "user", "content": texts(body["messages"][0]["content"])},
        {"role": "system", "content": texts(body["messages"][1]["content"])},
    ]
    assert request.stream is True
    assert request.response_fields == {"context_management": {"applied_edits": []}}


def test_first_turn_params_clamp_max_tokens_and_leave_deferred_tools_out():
    params = BUILDER.parse(FIRST["body"]).params.to_wire()
    names = [tool["name"] for tool in params.pop("tools")]
    assert params == {
        "max_tokens": 32000,
        "clamp_max_tokens": True,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }
    every = [tool["name"] for tool in FIRST["body"]["tools"]]
    assert names == [name for name in every if name != "DeferredToolPlaceholder"]


def test_second_turn_keeps_the_system_turn_between_user_turns():
    request = BUILDER.parse(first_body(messages=LATER["second_turn_messages"]))
    assert [m["role"] for m in request.messages] == [
        "system",
        "user",
        "system",
        "assistant",
        "user",
    ]
    assert request.messages[-2:] == [
        {"role": "assistant", "content": "Hello there."},
        {"role": "user", "content": "And again"},
    ]


def test_tool_round_trip_with_thinking_enabled():
    settings = LATER["tool_round_trip_settings"]
    body = first_body(
        messages=LATER["tool_round_trip_messages"],
        model=settings["model"],
        thinking=settings["thinking"],
    )
    del body["output_config"]
    request = BUILDER.parse(body)
    assert settings["thinking"] == {"budget_tokens": 31999, "type": "enabled", "display": "omitted"}
    call = {
        "id": "toolu_1",
        "name": "Read",
        "arguments": json.dumps({"file_path": "/home/dev/project/note.txt"}),
    }
    result = LATER["tool_round_trip_messages"][-1]["content"][0]["content"]
    assert request.messages[-2:] == [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": result, "tool_call_id": "toolu_1"},
    ]


@pytest.mark.parametrize("kind", ["enabled", "adaptive"])
def test_thinking_on_changes_nothing_the_worker_sees(kind: str):
    thinking: dict[str, Any] = {"type": kind}
    if kind == "enabled":
        thinking["budget_tokens"] = 1024
    base = {"model": "m", "max_tokens": 2048, "messages": HELLO}
    with_thinking = BUILDER.parse({**base, "thinking": thinking})
    assert with_thinking == BUILDER.parse(base)


def test_thinking_disabled_renders_the_template_with_thinking_off():
    base = {"model": "m", "max_tokens": 2048, "messages": HELLO}
    request = BUILDER.parse({**base, "thinking": {"type": "disabled"}})
    assert request.params.to_wire() == {
        **BUILDER.parse(base).params.to_wire(),
        "chat_template_kwargs": {"enable_thinking": False},
    }


def test_a_thinking_budget_past_max_tokens_is_accepted():
    # What Claude Code sends for claude-sonnet-4-5 with CLAUDE_CODE_MAX_OUTPUT_TOKENS=16.
    thinking = {"budget_tokens": 1024, "type": "enabled", "display": "omitted"}
    base = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": HELLO}
    assert BUILDER.parse({**base, "thinking": thinking}) == BUILDER.parse(base)


@pytest.mark.parametrize("effort", ["low", "medium", "high", "max"])
def test_effort_changes_nothing_the_worker_sees(effort: str):
    base = {"model": "m", "max_tokens": 8, "messages": HELLO}
    assert BUILDER.parse({**base, "output_config": {"effort": effort}}) == BUILDER.parse(base)


# -- context management -------------------------------------------------------------------


def thinking_turn(n: int) -> list[dict[str, Any]]:
    """A user turn and an assistant turn that thought (its blocks: thinking, text)."""
    thought = {"type": "thinking", "thinking": f"t{n}", "signature": "sig"}
    return [
        {"role": "user", "content": f"q{n}"},
        {"role": "assistant", "content": [thought, {"type": "text", "text": f"a{n}"}]},
    ]


THREE_THINKING_TURNS = [*thinking_turn(1), *thinking_turn(2), *thinking_turn(3)]
THREE_THINKING_TURNS[3]["content"].insert(0, {"type": "redacted_thinking", "data": "opaque"})


def edits_for(keep: Any) -> list[dict[str, Any]]:
    edit: dict[str, Any] = {"type": "clear_thinking_20251015"}
    if keep is not None:
        edit["keep"] = keep
    body = {"model": "m", "max_tokens": 8, "messages": [*THREE_THINKING_TURNS, *HELLO]}
    body["context_management"] = {"edits": [edit]}
    fields = BUILDER.parse(body).response_fields
    return list(fields["context_management"]["applied_edits"])


@pytest.mark.parametrize(
    ("keep", "cleared"),
    [
        (None, 2),
        ({"type": "thinking_turns", "value": 2}, 1),
        ("all", 0),
        (
            {"type": "thinking_turns", "value": 5},
            0,
        ),
    ],
)
def test_clear_thinking_reports_the_turns_it_cleared(keep: Any, cleared: int):
    expected = [
        {
            "type": "clear_thinking_20251015",
            "cleared_thinking_turns": cleared,
            "cleared_input_tokens": 0,
        }
    ]
    assert edits_for(keep) == (expected if cleared else [])


def test_thinking_blocks_are_their_turns_reasoning_and_redacted_ones_are_left_out():
    request = BUILDER.parse(
        {"model": "m", "max_tokens": 8, "messages": [*THREE_THINKING_TURNS, *HELLO]}
    )
    assert request.messages == [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "t1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2", "reasoning_content": "t2"},
        {"role": "user", "content": "q3"},
        {"role": "assistant", "content": "a3", "reasoning_content": "t3"},
        *HELLO,
    ]
    assert request.response_fields == {}  # no context_management asked for, none reported


@pytest.mark.parametrize(
    ("keep", "reasoning"),
    [
        (None, [None, None, "t3"]),
        ({"type": "thinking_turns", "value": 2}, [None, "t2", "t3"]),
        ("all", ["t1", "t2", "t3"]),
    ],
)
def test_cleared_thinking_is_left_out_of_the_prompt(keep: Any, reasoning: list[str | None]):
    edit: dict[str, Any] = {"type": "clear_thinking_20251015"}
    if keep is not None:
        edit["keep"] = keep
    body = {"model": "m", "max_tokens": 8, "messages": [*THREE_THINKING_TURNS, *HELLO]}
    request = BUILDER.parse({**body, "context_management": {"edits": [edit]}})
    assistant = [m for m in request.messages if m["role"] == "assistant"]
    assert [m.get("reasoning_content") for m in assistant] == reasoning


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            {"type": "clear_tool_uses_20250919"},
            'context_management.edits.0.type "clear_tool_uses_20250919" is not supported by '
            "this server",
        ),
        (
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}},
            "context_management.edits.0.keep.value must be >= 1, got 0",
        ),
    ],
)
def test_unknown_or_bad_edits_are_400s_naming_them(edit: dict[str, Any], message: str):
    body = {"model": "m", "max_tokens": 8, "messages": HELLO}
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse({**body, "context_management": {"edits": [edit]}})
    assert str(caught.value) == message
    assert caught.value.param == message.split(" ")[0]


def applied_fields() -> dict[str, Any]:
    applied = [
        {"type": "clear_thinking_20251015", "cleared_thinking_turns": 1, "cleared_input_tokens": 0}
    ]
    return {"context_management": {"applied_edits": applied}}


def test_the_response_reports_the_applied_edits():
    choice = ChoiceResult(0, "ok", FinishReason.STOP, 2, completion_tokens=1)
    request = ChatRequest("m", HELLO, SamplingParams(), response_fields=applied_fields())
    result = ChatResult("msg_1", "m", 0, [choice], 5, request=request)
    body = BUILDER.format_response(result)
    assert body["context_management"] == applied_fields()["context_management"]
    assert list(body)[-1] == "context_management"


def test_the_stream_reports_the_applied_edits_in_message_delta():
    request = ChatRequest(
        "m", HELLO, SamplingParams(), stream=True, response_fields=applied_fields()
    )
    state = StreamState("msg_1", "m", 0, request, prompt_tokens=5)
    choice = ChoiceResult(0, "ok", FinishReason.LENGTH, None, completion_tokens=1)
    events = events_of(BUILDER.stream_choice_end(state, choice))
    # Nothing was said: an empty text block opens and closes before the end.
    assert [name for name, _ in events[:2]] == ["content_block_start", "content_block_stop"]
    assert events[2] == (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": {
                "input_tokens": 5,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 1,
            },
            **applied_fields(),
        },
    )


# -- tools ----------------------------------------------------------------------------------


def test_input_examples_follow_the_description_and_cache_control_is_ignored():
    tool = {
        "name": "add",
        "description": "Adds.",
        "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
        "input_examples": [{"a": 1}, {"a": 2}],
        "cache_control": {"type": "ephemeral"},
    }
    body = {"model": "m", "max_tokens": 8, "messages": HELLO, "tools": [tool]}
    (parsed,) = BUILDER.parse(body).params.to_wire()["tools"]
    assert parsed["description"] == 'Adds.\n\nInput examples:\n{"a": 1}\n{"a": 2}'


def test_a_named_deferred_tool_cannot_be_forced():
    tool = {"name": "later", "input_schema": {"type": "object"}, "defer_loading": True}
    shown = {"name": "now", "input_schema": {"type": "object"}}
    body = {"model": "m", "max_tokens": 8, "messages": HELLO, "tools": [shown, tool]}
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse({**body, "tool_choice": {"type": "tool", "name": "later"}})
    assert caught.value.param == "tool_choice"


# -- over HTTP, as Claude Code sends it ----------------------------------------------------------


def hello(submit: Submit) -> list[Message]:
    rid = submit.request_id
    return [
        Accepted(rid, prompt_tokens=12000),
        Tokens(rid, 0, "Hello", [11]),
        Finished(
            rid, 0, FinishReason.LENGTH, prompt_tokens=12000, completion_tokens=1, cached_tokens=0
        ),
    ]


async def test_the_captured_request_streams_over_http_with_its_headers():
    headers = {**FIRST["headers"], "x-api-key": "x", "content-type": "application/json"}
    headers["anthropic-beta"] += ",some-future-beta-2099-01-01"  # unknown values: ignored
    async with in_process(hello, aliases=("claude-*",)) as run:
        body = first_body(model="claude-opus-5-5")
        answer = await run.client.post(FIRST["path"], json=body, headers=headers)
        assert answer.status_code == 200
        events = [
            line[len("event: ") :]
            for line in answer.text.splitlines()
            if line.startswith("event: ")
        ]
        assert events == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
        delta = json.loads(answer.text.split("event: message_delta\ndata: ")[1].split("\n")[0])
        assert delta["delta"]["stop_reason"] == "max_tokens"
        assert delta["context_management"] == {"applied_edits": []}
        (submit,) = run.worker.submits
        expected = BUILDER.parse(body)
        assert (submit.messages, submit.params.to_wire()) == (
            expected.messages,
            expected.params.to_wire(),
        )


def test_a_tool_reference_from_its_tool_search_loads_the_deferred_tool():
    # Captured: the model called ToolSearch ("select:WebFetch"); Claude Code answered with a
    # tool_reference and sent WebFetch among its tools with defer_loading.
    search = LATER["tool_search_round_trip"]
    assert search["tools_deferred"] == ["WebFetch", "DeferredToolPlaceholder"]
    web_fetch = {
        "name": "WebFetch",
        "description": "Fetches a URL.",
        "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}},
        "defer_loading": True,
    }
    body = first_body(tools=[*FIRST["body"]["tools"], web_fetch])
    before = [t["name"] for t in BUILDER.parse(body).params.to_wire()["tools"]]
    messages = [*FIRST["body"]["messages"], *search["messages_tail"]]
    request = BUILDER.parse({**body, "messages": messages})
    after = [t["name"] for t in request.params.to_wire()["tools"]]
    assert "WebFetch" not in before and after == [*before, "WebFetch"]
    assert "DeferredToolPlaceholder" not in after
    assert request.messages[-2:] == [
        {"role": "tool", "content": "", "tool_call_id": "toolu_1"},
        {"role": "user", "content": "Tool loaded."},
    ]


def test_a_tool_reference_to_no_given_tool_is_a_400_naming_it():
    result = {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [
            {"type": "text", "text": "found"},
            {"type": "tool_reference", "tool_name": "Nope"},
        ],
    }
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [result]}]}
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse(body)
    assert (
        str(caught.value) == 'messages.0.content.0.content.1.tool_name names no given tool: "Nope"'
    )
    result["content"] = [{"type": "image"}]
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse(body)
    assert str(caught.value) == (
        'messages.0.content.0.content.0.type must be "text" or "tool_reference", got "image"'
    )
