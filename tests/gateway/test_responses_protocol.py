"""ResponsesResponseBuilder: input items, settings and 400s; exact event sequences; the fold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.token_output import FinishReason, TokenLogprob, ToolCallDelta, TopLogprob
from common.wire import encode
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.base import ChatResult, ChoiceResult, StreamState
from gateway.protocols.responses import ResponsesResponseBuilder
from gateway.protocols.responses_body import InputItem, ResponsesBody
from gateway.protocols.responses_stream import ResponsesRequest
from gateway.response_store import ResponseStore

CODEX = json.loads((Path(__file__).parent / "fixtures" / "codex_requests.json").read_text())
RID = "resp_abc"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def builder() -> ResponsesResponseBuilder:
    return ResponsesResponseBuilder(ResponseStore(16, 1 << 20))


def parse(**fields: Any) -> ResponsesRequest:
    request = builder().parse({"input": "hi", **fields})
    assert isinstance(request, ResponsesRequest)
    return request


def parse_error(body: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        builder().parse(body)
    return caught.value


def codex_body(name: str) -> dict[str, Any]:
    return {**CODEX[name], "tools": CODEX["tools"]}


def function(name: str = "get_weather", **spec: Any) -> dict[str, Any]:
    return {"type": "function", "name": name, **spec}


# -- parse ------------------------------------------------------------------------------------


def test_a_string_input_is_one_user_turn_with_the_apis_defaults():
    request = parse()
    assert request.messages == [{"role": "user", "content": "hi"}]
    assert request.params.to_wire() == {"n": 1}
    assert (request.stream, request.store, request.logprobs, request.ignored_tools) == (
        False,
        True,
        False,
        (),
    )
    assert request.settings["tool_choice"] == "auto"
    assert request.settings["text"] == {"format": {"type": "text"}, "verbosity": "medium"}
    assert (request.settings["temperature"], request.settings["top_p"]) == (1.0, 1.0)


def test_items_become_turns_in_order():
    items = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Thinking."}],
            "content": [{"type": "reasoning_text", "text": "Hmm."}],
            "encrypted_content": "xyz",
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"x":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "two"}],
        },
        {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"},
    ]
    request = parse(input=items, instructions="You are terse.")
    assert request.messages == [
        {"role": "system", "content": "You are terse."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "a"},
        {
            "role": "assistant",
            "content": "b",
            "reasoning_content": "Hmm.",  # the reasoning item before it (not its summary)
            "tool_calls": [
                {"id": "c1", "name": "f", "arguments": "{}"},
                {"id": "c2", "name": "g", "arguments": '{"x":1}'},
            ],
        },
        {"role": "tool", "content": "one", "tool_call_id": "c1"},
        {"role": "tool", "content": "two", "tool_call_id": "c2"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c3", "name": "f", "arguments": "{}"}],
        },
    ]
    assert request.history == request.messages[1:]  # instructions are not carried over


def test_settings_land_on_the_workers_keywords():
    request = parse(
        max_output_tokens=64,
        temperature=0,
        top_p=0.5,
        top_logprobs=3,
        include=["message.output_text.logprobs", "reasoning.encrypted_content"],
        text={"format": {"type": "json_schema", "name": "city", "schema": WEATHER, "strict": True}},
        reasoning={"effort": "low", "summary": "auto"},
        metadata={"k": "v"},
        truncation="auto",
        prompt_cache_key="abc",
        parallel_tool_calls=False,
        store=False,
        stream=True,
    )
    assert request.params.to_wire() == {
        "n": 1,
        "max_tokens": 64,
        "temperature": 0.0,
        "top_p": 0.5,
        "logprobs": True,
        "top_logprobs": 3,
        "structured_output": {"type": "json_schema", "schema": WEATHER, "strict": True},
        "drop_oldest_turns": True,  # truncation "auto"
    }
    assert request.logprobs and request.stream and not request.store
    settings = request.settings
    assert settings["text"]["format"] == {
        "type": "json_schema",
        "name": "city",
        "schema": WEATHER,
        "strict": True,
    }
    assert settings["reasoning"] == {"effort": "low", "summary": "auto"}
    assert (settings["metadata"], settings["truncation"], settings["store"]) == (
        {"k": "v"},
        "auto",
        False,
    )
    assert (settings["max_output_tokens"], settings["top_logprobs"]) == (64, 3)


def test_truncation_disabled_drops_nothing():
    assert "drop_oldest_turns" not in parse(truncation="disabled").params
    assert "drop_oldest_turns" not in parse().params


def test_top_logprobs_without_include_computes_none():
    assert parse(top_logprobs=3).params.to_wire() == {"n": 1}
    assert parse(include=["message.output_text.logprobs"]).params.to_wire() == {
        "n": 1,
        "logprobs": True,
    }


def test_json_object_format_is_chats_json_object():
    request = parse(text={"format": {"type": "json_object"}})
    assert request.params.to_wire()["structured_output"] == {"type": "json_object"}


def test_function_tools_are_served_and_hosted_ones_ignored_by_name():
    request = parse(
        tools=[
            {"type": "web_search", "external_web_access": False},
            function(description="Weather now", parameters=WEATHER, strict=True),
            {"type": "namespace", "name": "ns", "description": "d", "tools": []},
            {"type": "web_search"},
        ],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    assert request.params.to_wire()["tools"] == [
        {"name": "get_weather", "parameters": WEATHER, "strict": True, "description": "Weather now"}
    ]
    assert request.params.to_wire()["tool_choice"] == {"name": "get_weather"}
    assert request.params.to_wire()["parallel_tool_calls"] is True
    assert request.ignored_tools == ("web_search", "namespace")
    assert builder().response_headers(request) == {
        "X-AstrAI-Ignored-Tools": "web_search, namespace"
    }
    assert [tool["name"] for tool in request.settings["tools"]] == ["get_weather"]
    assert request.settings["tool_choice"] == {"type": "function", "name": "get_weather"}


def test_allowed_tools_serve_only_the_functions_named():
    allowed = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "b"}, {"type": "web_search"}],
    }
    request = parse(
        tools=[function("a"), function("b"), {"type": "web_search"}], tool_choice=allowed
    )
    assert [tool["name"] for tool in request.params.to_wire()["tools"]] == ["b"]
    assert request.params.to_wire()["tool_choice"] == "required"
    assert request.settings["tool_choice"] == {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "b"}],
    }


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        ({"type": "allowed_tools", "mode": "any", "tools": [function("a")]}, "tool_choice.mode"),
        ({"type": "allowed_tools", "mode": "auto", "tools": []}, "tool_choice.tools"),
        ({"type": "allowed_tools", "mode": "auto", "tools": [5]}, "tool_choice.tools.0"),
        ({"type": "allowed_tools", "mode": "auto", "tools": [function("zz")]}, "tool_choice"),
    ],
)
def test_bad_allowed_tools_are_400s(choice: dict[str, Any], param: str):
    error = parse_error({"input": "hi", "tools": [function("a")], "tool_choice": choice})
    assert error.param == param


def test_a_second_tool_of_one_name_is_named_by_its_own_index():
    error = parse_error({"input": "hi", "tools": [{"type": "web_search"}, function(), function()]})
    assert (error.param, error.message) == ("tools.2", "tools.2: a second tool named 'get_weather'")


def test_only_hosted_tools_mean_no_tools():
    request = parse(tools=[{"type": "web_search"}], tool_choice="auto")
    assert "tools" not in request.params.to_wire()
    assert builder().response_headers(parse()) == {}


@pytest.mark.parametrize("name", ["first_turn", "after_tool_call", "second_turn"])
def test_what_codex_sends_is_accepted(name: str):
    request = parse(**codex_body(name))
    assert request.stream and not request.store
    assert request.ignored_tools == ("namespace", "web_search")
    served = [tool["name"] for tool in request.params.to_wire()["tools"]]
    assert served == [
        "exec_command",
        "write_stdin",
        "request_user_input",
        "view_image",
        "get_goal",
        "create_goal",
        "update_goal",
    ]
    roles = [turn["role"] for turn in request.messages]
    expected = {
        "first_turn": ["system", "system", "user", "user"],
        "after_tool_call": ["system", "system", "user", "user", "assistant", "tool"],
        "second_turn": [
            "system",
            "system",
            "user",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
        ],
    }
    assert roles == expected[name]


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({}, "input", "input is required (a string or a non-empty array of items)"),
        ({"input": []}, "input", "input is required (a string or a non-empty array of items)"),
        ({"input": 5}, "input", "input must be a string or an array of input items, got integer"),
        ({"input": [5]}, "input.0", "input.0 must be an object, got integer"),
        (
            {"input": [{"type": "item_reference", "id": "x"}]},
            "input.0.type",
            'input.0.type "item_reference" is not supported by this server',
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input.0.content.0.type",
            "input.0.content.0.type must be a text part (only text is supported), "
            'got "input_image"',
        ),
        (
            {"input": [{"role": "user"}]},
            "input.0.content",
            "input.0.content is required in a message item",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input.0.role", None),
        (
            {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input.0.call_id",
            "input.0.call_id is required in a function_call item",
        ),
        (
            {"input": [{"type": "function_call_output", "call_id": "c"}]},
            "input.0.output",
            "input.0.output is required in a function_call_output item",
        ),
        (
            {"input": "hi", "tools": [{"type": "function"}]},
            "tools.0.name",
            "tools.0.name is required in a function tool",
        ),
        ({"input": "hi", "tools": [{"type": "Web Search!"}]}, "tools.0.type", None),
        (
            {"input": "hi", "tool_choice": {"type": "web_search"}},
            "tool_choice.type",
            'tool_choice.type "web_search" is not supported by this server',
        ),
        (
            {"input": "hi", "tool_choice": "required"},
            "tool_choice",
            "tool_choice asks for a tool call, but no tools are given",
        ),
        (
            {
                "input": "hi",
                "tools": [function()],
                "tool_choice": {"type": "function", "name": "nope"},
            },
            "tool_choice",
            'tool_choice names no given tool: "nope"',
        ),
        ({"input": "hi", "text": {"format": {"type": "xml"}}}, "text.format.type", None),
        (
            {"input": "hi", "text": {"format": {"type": "json_schema", "schema": {}}}},
            "text.format.name",
            "text.format.name is required in a json_schema format",
        ),
        ({"input": "hi", "include": ["everything"]}, "include.0", None),
        ({"input": "hi", "metadata": {str(i): "v" for i in range(17)}}, "metadata", None),
        ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens", None),
        ({"input": "hi", "temperature": 2.5}, "temperature", None),
        ({"input": "hi", "truncation": "middle"}, "truncation", None),
        (
            {"input": "hi", "background": True},
            "background",
            "background is not supported by this server",
        ),
        (
            {"input": "hi", "conversation": "conv_1"},
            "conversation",
            "conversation is not supported by this server",
        ),
        (
            {"input": "hi", "previous_response_id": "resp_gone"},
            "previous_response_id",
            "Previous response with id 'resp_gone' not found.",
        ),
    ],
)
def test_bad_bodies_are_400s_naming_the_parameter(
    body: dict[str, Any], param: str, message: str | None
):
    error = parse_error(body)
    assert (error.kind, error.param) == (ErrorKind.INVALID_REQUEST, param)
    if message is not None:
        assert error.message == message


def test_a_missing_previous_response_has_openais_code():
    assert (
        parse_error({"input": "hi", "previous_response_id": "r"}).code
        == "previous_response_not_found"
    )


# -- events -----------------------------------------------------------------------------------


def make_state(**fields: Any) -> StreamState:
    return StreamState(
        request_id=RID,
        model="smol",
        created=1700000000,
        request=parse(stream=True, **fields),
        prompt_tokens=7,
        cached_tokens=4,
        completion_tokens=3,
    )


def events(lines: list[str]) -> list[dict[str, Any]]:
    """Each named SSE event's payload; its `event:` name must be its payload's type."""
    payloads = []
    for line in lines:
        head, data = line.removesuffix("\n\n").split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert head == f"event: {payload['type']}"
        payloads.append(payload)
    return payloads


def run(
    state: StreamState, steps: list[Any], reason: FinishReason = FinishReason.STOP
) -> list[dict[str, Any]]:
    b = builder()
    lines = b.stream_start(state)
    for step in steps:
        if isinstance(step, str):
            lines += b.stream_tokens(state, 0, step, [])
        else:
            lines += b.stream_tool_calls(state, 0, step)
    lines += b.stream_choice_end(state, ChoiceResult(0, finish_reason=reason, completion_tokens=3))
    lines += b.stream_end(state)
    payloads = events(lines)
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    return payloads


def kinds(payloads: list[dict[str, Any]]) -> list[str]:
    return [p["type"].removeprefix("response.") for p in payloads]


MESSAGE = f"msg_{RID.removeprefix('resp_')}_0"
USAGE = {
    "input_tokens": 7,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens": 3,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 10,
}


def test_a_text_answer_streams_openais_sequence():
    payloads = run(make_state(), ["Hel", "lo"])
    assert kinds(payloads) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    created = payloads[0]["response"]
    assert (created["id"], created["status"], created["output"], created["usage"]) == (
        RID,
        "in_progress",
        [],
        None,
    )
    assert payloads[2]["item"] == {
        "id": MESSAGE,
        "type": "message",
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }
    where = {"item_id": MESSAGE, "output_index": 0, "content_index": 0}
    empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    assert payloads[3] == {
        "type": "response.content_part.added",
        "sequence_number": 3,
        **where,
        "part": empty,
    }
    assert payloads[4] == {
        "type": "response.output_text.delta",
        "sequence_number": 4,
        **where,
        "delta": "Hel",
        "logprobs": [],
    }
    assert payloads[6] == {
        "type": "response.output_text.done",
        "sequence_number": 6,
        **where,
        "text": "Hello",
        "logprobs": [],
    }
    done_item = {
        **payloads[2]["item"],
        "status": "completed",
        "content": [{**empty, "text": "Hello"}],
    }
    assert payloads[8]["item"] == done_item
    final = payloads[9]["response"]
    assert (final["status"], final["output"], final["usage"]) == ("completed", [done_item], USAGE)
    assert final["incomplete_details"] is None and final["error"] is None


def test_a_tool_call_after_text_closes_the_message_first():
    parts = [
        ToolCallDelta(0, "abc", "get_weather", ""),
        ToolCallDelta(0, None, None, '{"city":'),
        ToolCallDelta(0, None, None, '"Paris"}'),
    ]
    second = [ToolCallDelta(1, "def", "get_weather", '{"city":"Oslo"}')]
    payloads = run(
        make_state(tools=[function(parameters=WEATHER)]),
        ["Let me look.", parts, second],
        FinishReason.TOOL_CALLS,
    )
    assert kinds(payloads) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]
    call_id = f"fc_{RID.removeprefix('resp_')}_1"
    assert payloads[8] == {
        "type": "response.output_item.added",
        "sequence_number": 8,
        "output_index": 1,
        "item": {
            "id": call_id,
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": "call_abc",
            "name": "get_weather",
        },
    }
    assert payloads[10]["delta"] == '"Paris"}'
    assert payloads[11] == {
        "type": "response.function_call_arguments.done",
        "sequence_number": 11,
        "item_id": call_id,
        "output_index": 1,
        "arguments": '{"city":"Paris"}',
    }
    output = payloads[-1]["response"]["output"]
    assert [(item["type"], item["status"]) for item in output] == [
        ("message", "completed"),
        ("function_call", "completed"),
        ("function_call", "completed"),
    ]
    assert (output[2]["call_id"], output[2]["arguments"]) == ("call_def", '{"city":"Oslo"}')


def test_a_call_alone_has_no_message():
    payloads = run(
        make_state(tools=[function()]),
        [[ToolCallDelta(0, "a", "get_weather", "{}")]],
        FinishReason.TOOL_CALLS,
    )
    assert [item["type"] for item in payloads[-1]["response"]["output"]] == ["function_call"]


def test_the_budget_running_out_is_an_incomplete_response():
    payloads = run(make_state(max_output_tokens=3), ["abc"], FinishReason.LENGTH)
    assert kinds(payloads)[-2:] == ["output_item.done", "incomplete"]
    assert payloads[-2]["item"]["status"] == "incomplete"
    final = payloads[-1]["response"]
    assert (final["status"], final["incomplete_details"]) == (
        "incomplete",
        {"reason": "max_output_tokens"},
    )


def test_the_servers_own_budget_running_out_completes_with_the_item_incomplete():
    payloads = run(make_state(), ["abc"], FinishReason.LENGTH)  # no max_output_tokens
    assert kinds(payloads)[-2:] == ["output_item.done", "completed"]
    assert payloads[-2]["item"]["status"] == "incomplete"
    final = payloads[-1]["response"]
    assert (final["status"], final["incomplete_details"]) == ("completed", None)
    assert final["output"][0]["status"] == "incomplete"


def test_saying_nothing_is_one_empty_message():
    payloads = run(make_state(), [])
    assert kinds(payloads) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    assert payloads[-1]["response"]["output"][0]["content"][0]["text"] == ""


def test_a_failure_mid_stream_is_response_failed():
    b, state = builder(), make_state()
    lines = b.stream_start(state) + b.stream_tokens(state, 0, "Hel", [])
    lines += b.stream_error(state, GatewayError(ErrorKind.UNAVAILABLE, "worker lost"))
    payloads = events(lines)
    assert kinds(payloads)[-5:] == [
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "failed",
    ]
    assert payloads[-2]["item"]["status"] == "incomplete"
    final = payloads[-1]["response"]
    assert (final["status"], final["error"]) == (
        "failed",
        {"code": "server_error", "message": "worker lost"},
    )
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))


def test_logprobs_when_included():
    top = (TopLogprob(5, "Hi", -0.5), TopLogprob(6, "Yo", -1.0))
    b, state = builder(), make_state(include=["message.output_text.logprobs"], top_logprobs=2)
    lines = b.stream_start(state) + b.stream_tokens(
        state, 0, "Hi", [TokenLogprob(5, "Hi", -0.5, top)]
    )
    lines += b.stream_choice_end(
        state, ChoiceResult(0, finish_reason=FinishReason.STOP)
    ) + b.stream_end(state)
    payloads = events(lines)
    shaped = {
        "token": "Hi",
        "logprob": -0.5,
        "top_logprobs": [{"token": "Hi", "logprob": -0.5}, {"token": "Yo", "logprob": -1.0}],
    }
    assert payloads[4]["logprobs"] == [shaped]
    assert payloads[5]["logprobs"] == [shaped]  # output_text.done
    part = payloads[-1]["response"]["output"][0]["content"][0]
    assert part["logprobs"] == [
        {
            "token": "Hi",
            "logprob": -0.5,
            "bytes": [72, 105],
            "top_logprobs": [
                {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
                {"token": "Yo", "logprob": -1.0, "bytes": [89, 111]},
            ],
        }
    ]


def test_logprobs_are_left_out_unless_included():
    b, state = builder(), make_state()
    payloads = events(
        b.stream_start(state) + b.stream_tokens(state, 0, "Hi", [TokenLogprob(5, "Hi", -0.5)])
    )
    assert payloads[-1]["logprobs"] == []


def test_the_non_streamed_body_is_the_streams_final_response():
    state = make_state(tools=[function()])
    parts = [
        ToolCallDelta(0, "abc", "get_weather", ""),
        ToolCallDelta(0, None, None, '{"city":"Paris"}'),
    ]
    streamed = run(state, ["Sure.", parts], FinishReason.TOOL_CALLS)[-1]["response"]
    choice = ChoiceResult(0, "Sure.", FinishReason.TOOL_CALLS, completion_tokens=3)
    choice.add_tool_call_parts(parts)
    result = ChatResult(
        RID, "smol", 1700000000, [choice], prompt_tokens=7, cached_tokens=4, request=state.request
    )
    assert builder().format_response(result) == streamed


def test_stored_responses_continue_with_previous_response_id():
    b = builder()
    state = make_state(
        input=[{"role": "user", "content": "Weather?"}],
        tools=[function()],
        instructions="Be terse.",
    )
    b.stream_start(state)
    b.stream_tool_calls(state, 0, [ToolCallDelta(0, "abc", "get_weather", '{"city":"Paris"}')])
    b.stream_choice_end(state, ChoiceResult(0, finish_reason=FinishReason.TOOL_CALLS))
    b.stream_end(state)
    assert b.store.get(RID)["status"] == "completed"
    follow = b.parse(
        {
            "previous_response_id": RID,
            "input": [{"type": "function_call_output", "call_id": "call_abc", "output": "sunny"}],
        }
    )
    assert follow.messages == [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_abc", "name": "get_weather", "arguments": '{"city":"Paris"}'}
            ],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "call_abc"},
    ]


def test_store_false_keeps_nothing():
    b = builder()
    state = make_state(store=False)
    b.stream_start(state)
    b.stream_choice_end(state, ChoiceResult(0, finish_reason=FinishReason.STOP))
    b.stream_end(state)
    assert len(b.store) == 0


def test_errors_are_openais_shape():
    error = GatewayError.invalid("input is required", "input")
    assert builder().error_body(error) == (
        400,
        {
            "error": {
                "message": "input is required",
                "type": "invalid_request_error",
                "param": "input",
                "code": None,
            }
        },
    )


# -- any JSON ---------------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)
TOP_FIELDS = sorted(ResponsesBody.model_fields) + sorted(ResponsesBody.unsupported)
ITEM_FIELDS = sorted(InputItem.model_fields)


@given(st.sampled_from(TOP_FIELDS), JSON)
def test_any_json_in_any_field_parses_or_is_a_400(key: str, value: Any):
    body = {"input": "hi", "stream": True, key: value}
    try:
        request = builder().parse(body)
    except GatewayError as error:
        assert (error.kind, error.param is not None) == (ErrorKind.INVALID_REQUEST, True)
    else:
        encode(request.submit("r"))  # what parses crosses msgpack: never a 500 after it


@given(
    st.sampled_from(ITEM_FIELDS),
    JSON,
    st.sampled_from(["message", "function_call", "function_call_output"]),
)
def test_any_json_in_any_item_field_parses_or_is_a_400(key: str, value: Any, kind: str):
    item = {"type": kind, "role": "user", "content": "hi", "call_id": "c", "name": "f"}
    item.update(arguments="{}", output="x")
    try:
        request = builder().parse({"input": [{**item, key: value}]})
    except GatewayError as error:
        assert error.kind == ErrorKind.INVALID_REQUEST
        assert error.param is not None and error.param.startswith("input")
    else:
        encode(request.submit("r"))
