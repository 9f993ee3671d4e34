"""Tool calling in both protocols: tool definitions, tool turns, 400s, bodies and streams."""

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.sampling_params import SamplingParams
from common.token_output import ToolCallDelta
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.anthropic import AnthropicResponseBuilder
from gateway.protocols.base import (
    ChatRequest,
    ChatResult,
    ChoiceResult,
    StreamState,
)
from gateway.protocols.openai import OpenAIResponseBuilder
from tests.gateway.test_anthropic_protocol import events_of
from tests.gateway.test_openai_protocol import data

OPENAI = OpenAIResponseBuilder()
ANTHROPIC = AnthropicResponseBuilder()
HELLO = [{"role": "user", "content": "hi"}]
ANTHROPIC_REQUIRED = {"model": "smol", "max_tokens": 32, "messages": HELLO}
TOOL_TOP = {"n": 1}  # what OpenAI requests always send; the rest are defaults
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TOOL_KEYS = {"tools", "tool_choice", "parallel_tool_calls"}


def openai_parse(**fields: Any) -> ChatRequest:
    return OPENAI.parse({"messages": HELLO, **fields})


def anthropic_parse(**fields: Any) -> ChatRequest:
    return ANTHROPIC.parse({**ANTHROPIC_REQUIRED, **fields})


def parse_error(builder: Any, body: dict[str, Any]) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        builder.parse(body)
    return caught.value


def function(name: str = "get_weather", **spec: Any) -> dict[str, Any]:
    """An OpenAI tool definition."""
    return {"type": "function", "function": {"name": name, **spec}}


def anthropic_tool(name: str = "get_weather", **spec: Any) -> dict[str, Any]:
    return {"name": name, "input_schema": {"type": "object"}, **spec}


def make_state(request_id: str) -> StreamState:
    request = ChatRequest(
        model="smol", messages=HELLO, params=SamplingParams(**TOOL_TOP), stream=True
    )
    return StreamState(
        request_id=request_id,
        model="smol",
        created=1700000000,
        request=request,
        prompt_tokens=7,
        cached_tokens=4,
        completion_tokens=2,
    )


# Two calls as the worker sends them: id and name first (no arguments), then argument text.
FIRST_CALL_PARTS = [
    ToolCallDelta(0, "abc", "get_weather", ""),
    ToolCallDelta(0, None, None, '{"city":'),
    ToolCallDelta(0, None, None, '"Paris"}'),
]
SECOND_CALL_PARTS = [
    ToolCallDelta(1, "def", "get_time", ""),
    ToolCallDelta(1, None, None, '{"zone":"CET"}'),
]


def tool_choice_result(text: str = "", parts: list[ToolCallDelta] | None = None) -> ChoiceResult:
    choice = ChoiceResult(0, text, "tool_calls", completion_tokens=12)
    choice.add_tool_call_parts(FIRST_CALL_PARTS + SECOND_CALL_PARTS if parts is None else parts)
    return choice


def result_with(request_id: str, choice: ChoiceResult) -> ChatResult:
    return ChatResult(request_id, "smol", 1700000000, [choice], prompt_tokens=9, cached_tokens=6)


# -- OpenAI parse: what is accepted -------------------------------------------------------


def test_openai_tools_become_the_workers_tool_definitions():
    request = openai_parse(
        tools=[
            function(description="Weather now", parameters=WEATHER_SCHEMA, strict=True),
            function("get_time"),
        ]
    )
    assert request.params.to_wire() == {
        **TOOL_TOP,
        "tools": [
            {
                "name": "get_weather",
                "parameters": WEATHER_SCHEMA,
                "strict": True,
                "description": "Weather now",
            },
            {"name": "get_time", "parameters": {"type": "object"}, "strict": None},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        ("none", "none"),
        ("auto", "auto"),
        ("required", "required"),
        ({"type": "function", "function": {"name": "get_time"}}, {"name": "get_time"}),
    ],
)
def test_openai_tool_choice_maps_to_the_workers_choice(tool_choice, expected):
    request = openai_parse(tools=[function(), function("get_time")], tool_choice=tool_choice)
    assert request.params.to_wire()["tool_choice"] == expected


@pytest.mark.parametrize(("value", "expected"), [(False, False), (True, True), (None, True)])
def test_openai_parallel_tool_calls_defaults_to_true(value, expected):
    request = openai_parse(tools=[function()], parallel_tool_calls=value)
    assert request.params.to_wire()["parallel_tool_calls"] is expected


@pytest.mark.parametrize("extra", [{}, {"tool_choice": "none"}, {"tool_choice": "auto"}])
def test_openai_without_tools_sends_no_tool_keys(extra):
    assert not TOOL_KEYS & openai_parse(**extra).params.to_wire().keys()


def test_openai_assistant_tool_calls_and_tool_results_become_neutral_messages():
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "content": "18C, sunny", "tool_call_id": "call_1"},
        {"role": "tool", "content": [{"type": "text", "text": "14:00"}], "tool_call_id": "call_2"},
    ]
    assert openai_parse(messages=messages).messages == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
                {"id": "call_2", "name": "get_time", "arguments": "{}"},
            ],
        },
        {"role": "tool", "content": "18C, sunny", "tool_call_id": "call_1"},
        {"role": "tool", "content": "14:00", "tool_call_id": "call_2"},
    ]


# -- Anthropic parse: what is accepted ----------------------------------------------------


def test_anthropic_tools_become_the_workers_tool_definitions():
    request = anthropic_parse(
        tools=[
            {"name": "get_weather", "description": "Weather now", "input_schema": WEATHER_SCHEMA},
            anthropic_tool("get_time"),
        ]
    )
    assert request.params.to_wire() == {
        "max_tokens": 32,
        "clamp_max_tokens": True,
        "tools": [
            {
                "name": "get_weather",
                "parameters": WEATHER_SCHEMA,
                "strict": None,
                "description": "Weather now",
            },
            {"name": "get_time", "parameters": {"type": "object"}, "strict": None},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
    }


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "tool", "name": "get_time"}, {"name": "get_time"}),
        ({"type": "none"}, "none"),
    ],
)
def test_anthropic_tool_choice_maps_to_the_workers_choice(tool_choice, expected):
    request = anthropic_parse(
        tools=[anthropic_tool(), anthropic_tool("get_time")], tool_choice=tool_choice
    )
    assert request.params.to_wire()["tool_choice"] == expected


@pytest.mark.parametrize(("disable", "parallel"), [(True, False), (False, True), (None, True)])
def test_anthropic_disable_parallel_tool_use_turns_parallel_calls_off(disable, parallel):
    tool_choice = {"type": "auto", "disable_parallel_tool_use": disable}
    request = anthropic_parse(tools=[anthropic_tool()], tool_choice=tool_choice)
    assert request.params.to_wire()["parallel_tool_calls"] is parallel


def test_anthropic_without_tools_sends_no_tool_keys():
    assert not TOOL_KEYS & anthropic_parse(tool_choice={"type": "auto"}).params.to_wire().keys()


def test_anthropic_tool_use_turn_becomes_one_assistant_message_with_tool_calls():
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris", "days": [1, 2]},
                },
                {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
            ],
        },
    ]
    parsed = anthropic_parse(messages=messages).messages
    arguments = [call.pop("arguments") for call in parsed[1]["tool_calls"]]
    assert parsed == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {"id": "toolu_1", "name": "get_weather"},
                {"id": "toolu_2", "name": "get_time"},
            ],
        },
    ]
    assert [json.loads(text) for text in arguments] == [{"city": "Paris", "days": [1, 2]}, {}]


def test_anthropic_tool_results_become_tool_messages_then_the_users_text():
    messages = [
        {"role": "user", "content": "Weather and time in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
                {"type": "tool_use", "id": "toolu_3", "name": "get_date", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "14:00"}, {"type": "text", "text": "CET"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_3",
                    "content": "no calendar",
                    "is_error": True,
                },
                {"type": "text", "text": "Thanks."},
                {"type": "text", "text": "Summarise."},
            ],
        },
    ]
    assert anthropic_parse(messages=messages).messages[2:] == [
        {"role": "tool", "content": "18C", "tool_call_id": "toolu_1"},
        {"role": "tool", "content": "14:00\nCET", "tool_call_id": "toolu_2"},
        {"role": "tool", "content": "Error: no calendar", "tool_call_id": "toolu_3"},
        {"role": "user", "content": "Thanks.\nSummarise."},
    ]


def test_anthropic_tool_results_alone_add_no_empty_user_message():
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}],
        },
    ]
    assert anthropic_parse(messages=messages).messages[-1] == {
        "role": "tool",
        "content": "18C",
        "tool_call_id": "toolu_1",
    }


# -- 400s ---------------------------------------------------------------------------------

OPENAI_BAD = [
    ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools.0.function.name"),
    ({"tools": [function("")]}, "tools.0.function.name"),
    ({"tools": [function(parameters=[])]}, "tools.0.function.parameters"),
    ({"tools": [function(parameters="object")]}, "tools.0.function.parameters"),
    ({"tools": [function(parameters={"type": "nonsense"})]}, "tools.0.function.parameters"),
    (
        {"tools": [function(), function("b", parameters={"type": "nonsense"})]},
        "tools.1.function.parameters",
    ),
    ({"tools": [function(strict="yes")]}, "tools.0.function.strict"),
    ({"tools": [{"type": "retrieval", "function": {"name": "x"}}]}, "tools.0.type"),
    ({"tools": ["get_weather"]}, "tools.0"),
    ({"tools": {"get_weather": {}}}, "tools"),
    ({"tools": [function(), function("get_time"), function()]}, "tools.2"),
    (
        {
            "tools": [function()],
            "tool_choice": {"type": "function", "function": {"name": "get_time"}},
        },
        "tool_choice",
    ),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
    ({"tools": [function()], "tool_choice": "any"}, "tool_choice"),
    ({"tools": [function()], "tool_choice": {"type": "auto"}}, "tool_choice"),
    ({"tools": [function()], "tool_choice": {"type": "function", "name": "x"}}, "tool_choice"),
    ({"tools": [function()], "tool_choice": 1}, "tool_choice"),
    ({"tools": [function()], "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"messages": [{"role": "tool", "content": "18C"}]}, "messages.0.tool_call_id"),
    (
        {"messages": [{"role": "tool", "content": "18C", "tool_call_id": 7}]},
        "messages.0.tool_call_id",
    ),
    (
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "1", "type": "function", "function": {"arguments": ""}}],
                }
            ]
        },
        "messages.0.tool_calls.0.function.name",
    ),
    (
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "1", "function": {"name": "f", "arguments": {"city": "Paris"}}}
                    ],
                }
            ]
        },
        "messages.0.tool_calls.0.function.arguments",
    ),
    (
        {"messages": [{"role": "assistant", "content": None, "tool_calls": {}}]},
        "messages.0.tool_calls",
    ),
]


@pytest.mark.parametrize(("fields", "param"), OPENAI_BAD)
def test_openai_bad_tool_request_is_a_400_naming_the_parameter(fields, param):
    error = parse_error(OPENAI, {"messages": HELLO, **fields})
    assert (error.kind, error.kind.openai_status, error.param) == (
        ErrorKind.INVALID_REQUEST,
        400,
        param,
    )


ANTHROPIC_BAD = [
    ({"tools": [{"input_schema": {"type": "object"}}]}, "tools.0.name"),
    ({"tools": [anthropic_tool(name=3)]}, "tools.0.name"),
    ({"tools": [{"name": "get_weather"}]}, "tools.0.input_schema"),
    ({"tools": [anthropic_tool(input_schema=[])]}, "tools.0.input_schema"),
    ({"tools": [anthropic_tool(input_schema={"type": "nonsense"})]}, "tools.0.input_schema"),
    ({"tools": [anthropic_tool(type="bash_20250124")]}, "tools.0.type"),
    ({"tools": [anthropic_tool(strict=1)]}, "tools.0.strict"),
    ({"tools": [anthropic_tool(), anthropic_tool()]}, "tools.1"),
    (
        {"tools": [anthropic_tool()], "tool_choice": {"type": "tool", "name": "get_time"}},
        "tool_choice",
    ),
    ({"tools": [anthropic_tool()], "tool_choice": {"type": "tool"}}, "tool_choice"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ({"tool_choice": {"type": "tool", "name": "get_weather"}}, "tool_choice"),
    ({"tools": [anthropic_tool()], "tool_choice": "auto"}, "tool_choice"),
    ({"tools": [anthropic_tool()], "tool_choice": {"type": "required"}}, "tool_choice.type"),
    (
        {
            "tools": [anthropic_tool()],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"},
        },
        "tool_choice.disable_parallel_tool_use",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
        "messages.0.content.0.tool_use_id",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "tool_use", "name": "f"}]}]},
        "messages.0.content.0.type",
    ),
    (
        {
            "messages": [
                {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
            ]
        },
        "messages.0.content.0.type",
    ),
    (
        {
            "messages": [
                {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": "x"}]}
            ]
        },
        "messages.0.content.0.input",
    ),
]


@pytest.mark.parametrize(("fields", "param"), ANTHROPIC_BAD)
def test_anthropic_bad_tool_request_is_a_400_naming_the_parameter(fields, param):
    error = parse_error(ANTHROPIC, {**ANTHROPIC_REQUIRED, **fields})
    assert (error.kind, error.kind.anthropic_status, error.param) == (
        ErrorKind.INVALID_REQUEST,
        400,
        param,
    )


def test_uncompilable_schema_error_says_why():
    error = parse_error(
        OPENAI, {"messages": HELLO, "tools": [function(parameters={"type": "nonsense"})]}
    )
    assert error.message.startswith("tools.0.function.parameters: ")
    assert "nonsense" in error.message


def test_unknown_tool_choice_name_error_names_the_function():
    tool_choice = {"type": "function", "function": {"name": "get_time"}}
    error = parse_error(
        OPENAI, {"messages": HELLO, "tools": [function()], "tool_choice": tool_choice}
    )
    assert '"get_time"' in error.message and error.param == "tool_choice"


def test_openai_tool_whose_function_is_not_an_object_is_a_400():
    error = parse_error(
        OPENAI, {"messages": HELLO, "tools": [{"type": "function", "function": "get_weather"}]}
    )
    assert (error.kind, error.param) == (ErrorKind.INVALID_REQUEST, "tools.0.function")


def test_anthropic_tool_with_a_stray_function_field_parses_or_is_a_400():
    tool = {**anthropic_tool(), "function": "get_weather"}
    try:
        anthropic_parse(tools=[tool])
    except GatewayError as error:
        assert error.kind == ErrorKind.INVALID_REQUEST


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
TOOL_FIELDS = ["tools", "tool_choice", "parallel_tool_calls"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(TOOL_FIELDS), JSON)
def test_any_json_in_a_tool_field_parses_or_is_a_400(key, value):
    for builder, body in ((OPENAI, {"messages": HELLO}), (ANTHROPIC, ANTHROPIC_REQUIRED)):
        try:
            builder.parse({**body, key: value})
        except GatewayError as error:
            assert (error.kind, error.param is not None) == (ErrorKind.INVALID_REQUEST, True)


# -- OpenAI responses ---------------------------------------------------------------------


def test_openai_response_with_tool_calls():
    body = OPENAI.format_response(result_with("chatcmpl-abc", tool_choice_result()))
    assert body["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_abc",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_def",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": '{"zone":"CET"}'},
                    },
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ]


def test_openai_response_keeps_text_next_to_tool_calls():
    choice = tool_choice_result("Checking.", FIRST_CALL_PARTS)
    message = OPENAI.format_response(result_with("chatcmpl-abc", choice))["choices"][0]["message"]
    assert (message["content"], len(message["tool_calls"])) == ("Checking.", 1)


def test_openai_stream_of_tool_calls():
    state = make_state("chatcmpl-abc")
    events = OPENAI.stream_tool_calls(state, 0, FIRST_CALL_PARTS)
    events += OPENAI.stream_tool_calls(state, 0, SECOND_CALL_PARTS)
    events += OPENAI.stream_choice_end(state, tool_choice_result())
    deltas = [chunk["choices"] for chunk in data(events)]

    def call_delta(call: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"index": 0, "delta": {"tool_calls": [call]}, "logprobs": None, "finish_reason": None}
        ]

    assert deltas == [
        call_delta(
            {
                "index": 0,
                "id": "call_abc",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ),
        call_delta({"index": 0, "function": {"arguments": '{"city":'}}),
        call_delta({"index": 0, "function": {"arguments": '"Paris"}'}}),
        call_delta(
            {
                "index": 1,
                "id": "call_def",
                "type": "function",
                "function": {"name": "get_time", "arguments": ""},
            }
        ),
        call_delta({"index": 1, "function": {"arguments": '{"zone":"CET"}'}}),
        [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}],
    ]


def test_openai_streamed_argument_fragments_join_to_the_arguments():
    state = make_state("chatcmpl-abc")
    chunks = data(OPENAI.stream_tool_calls(state, 0, FIRST_CALL_PARTS + SECOND_CALL_PARTS))
    joined: dict[int, str] = {}
    for chunk in chunks:
        (call,) = chunk["choices"][0]["delta"]["tool_calls"]
        joined[call["index"]] = joined.get(call["index"], "") + call["function"]["arguments"]
    assert {i: json.loads(text) for i, text in joined.items()} == {
        0: {"city": "Paris"},
        1: {"zone": "CET"},
    }


# -- Anthropic responses ------------------------------------------------------------------


def test_anthropic_response_with_tool_calls():
    body = ANTHROPIC.format_response(result_with("msg_abc", tool_choice_result()))
    assert (body["content"], body["stop_reason"], body["stop_sequence"]) == (
        [
            {
                "type": "tool_use",
                "id": "toolu_abc",
                "name": "get_weather",
                "input": {"city": "Paris"},
            },
            {"type": "tool_use", "id": "toolu_def", "name": "get_time", "input": {"zone": "CET"}},
        ],
        "tool_use",
        None,
    )


def test_anthropic_response_keeps_text_before_tool_use():
    choice = tool_choice_result("Checking.", FIRST_CALL_PARTS)
    assert ANTHROPIC.format_response(result_with("msg_abc", choice))["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {"city": "Paris"}},
    ]


def test_anthropic_response_with_arguments_cut_short_gives_empty_input():
    choice = ChoiceResult(0, "", "length", completion_tokens=32)
    choice.add_tool_call_parts(FIRST_CALL_PARTS[:2])
    body = ANTHROPIC.format_response(result_with("msg_abc", choice))
    assert (body["content"], body["stop_reason"]) == (
        [{"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {}}],
        "max_tokens",
    )


def block_stop(index: int) -> tuple[str, Any]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def tool_use_start(index: int, call_id: str, name: str) -> tuple[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def json_delta(index: int, fragment: str) -> tuple[str, Any]:
    delta = {"type": "input_json_delta", "partial_json": fragment}
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def test_anthropic_stream_of_tool_calls():
    state = make_state("msg_abc")
    events = ANTHROPIC.stream_start(state)
    events += ANTHROPIC.stream_tool_calls(state, 0, FIRST_CALL_PARTS)
    events += ANTHROPIC.stream_tool_calls(state, 0, SECOND_CALL_PARTS)
    events += ANTHROPIC.stream_choice_end(state, tool_choice_result())
    decoded = events_of(events)
    assert [name for name, _ in decoded[:2]] == ["message_start", "content_block_start"]
    assert decoded[1][1]["content_block"] == {"type": "text", "text": ""}
    assert decoded[2:] == [
        block_stop(0),
        tool_use_start(1, "toolu_abc", "get_weather"),
        json_delta(1, '{"city":'),
        json_delta(1, '"Paris"}'),
        block_stop(1),
        tool_use_start(2, "toolu_def", "get_time"),
        json_delta(2, '{"zone":"CET"}'),
        block_stop(2),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {
                    "input_tokens": 3,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 4,
                    "output_tokens": 12,
                },
            },
        ),
    ]


def test_anthropic_streamed_json_fragments_join_to_the_input():
    state = make_state("msg_abc")
    ANTHROPIC.stream_start(state)
    events = events_of(ANTHROPIC.stream_tool_calls(state, 0, FIRST_CALL_PARTS))
    fragments = [
        payload["delta"]["partial_json"]
        for name, payload in events
        if name == "content_block_delta"
    ]
    assert json.loads("".join(fragments)) == {"city": "Paris"}
