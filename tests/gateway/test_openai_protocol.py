"""OpenAIResponseBuilder: every parameter, every 400, exact bodies and exact SSE sequences."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.sampling_params import SamplingParams
from common.token_output import TokenLogprob, TopLogprob
from common.wire import encode
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.base import (
    ChatRequest,
    ChatResult,
    ChoiceResult,
    StreamState,
)
from gateway.protocols.openai import OpenAIResponseBuilder

ROOT = Path(__file__).resolve().parents[2]
BUILDER = OpenAIResponseBuilder()
HELLO = [{"role": "user", "content": "hi"}]
DEFAULT_PARAMS = {"n": 1}  # the rest are SamplingParams defaults, the same on both sides


def parse(**fields: Any) -> ChatRequest:
    return BUILDER.parse({"messages": HELLO, **fields})


def parse_error(body: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse(body)
    return caught.value


def make_state(n: int = 1, include_usage: bool = False) -> StreamState:
    request = ChatRequest(
        model="smol",
        messages=HELLO,
        params=SamplingParams(**{**DEFAULT_PARAMS, "n": n}),
        stream=True,
        include_usage=include_usage,
    )
    return StreamState(
        request_id="chatcmpl-abc",
        model="smol",
        created=1700000000,
        request=request,
        prompt_tokens=7,
        cached_tokens=4,
        completion_tokens=2 * n,
    )


def data(events: list[str]) -> list[Any]:
    """Each `data: …\\n\\n` event's payload, JSON-decoded; `[DONE]` stays a string."""
    payloads = []
    for event in events:
        assert event.startswith("data: ") and event.endswith("\n\n"), event
        text = event[len("data: ") : -2]
        payloads.append(text if text == "[DONE]" else json.loads(text))
    return payloads


def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "smol",
        "choices": choices,
        **extra,
    }


def delta(
    index: int, body: dict[str, Any], logprobs: Any = None, finish: str | None = None
) -> dict[str, Any]:
    return {"index": index, "delta": body, "logprobs": logprobs, "finish_reason": finish}


# -- parse: what is accepted --------------------------------------------------------------


def test_minimal_request_gets_explicit_defaults():
    assert parse() == ChatRequest(
        model=None, messages=HELLO, params=SamplingParams(**DEFAULT_PARAMS)
    )


# The sampling parameters both OpenAI routes take, and the worker keywords they become.
SHARED_FIELDS: dict[str, Any] = {
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 40,
    "min_p": 0.05,
    "stop": ["\n\n", "END"],
    "n": 3,
    "seed": 1234,
    "presence_penalty": 0.5,
    "frequency_penalty": -0.5,
    "repetition_penalty": 1.1,
    "ignore_eos": True,
    "min_tokens": 8,
    "stop_token_ids": [2, 7],
    "logit_bias": {"50": -100},
}
SHARED_PARAMS = {**SHARED_FIELDS, "logit_bias": [[50, -100.0]]}


def test_every_parameter_lands_on_its_sampling_keyword():
    request = parse(
        **SHARED_FIELDS,
        model="smol",
        max_tokens=64,
        logprobs=True,
        top_logprobs=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert request == ChatRequest(
        model="smol",
        messages=HELLO,
        params=SamplingParams(**SHARED_PARAMS, max_tokens=64, logprobs=True, top_logprobs=5),
        stream=True,
        include_usage=True,
    )


def test_integer_numbers_become_floats():
    params = parse(temperature=0, top_p=1, presence_penalty=2).params.to_wire()
    assert params == {**DEFAULT_PARAMS, "temperature": 0.0, "top_p": 1.0, "presence_penalty": 2.0}
    assert type(params["temperature"]) is float


def test_max_completion_tokens_wins_over_max_tokens():
    assert parse(max_tokens=10, max_completion_tokens=20).params.to_wire()["max_tokens"] == 20
    assert parse(max_completion_tokens=5).params.to_wire()["max_tokens"] == 5


def test_top_k_minus_one_means_off():
    assert parse(top_k=-1).params.to_wire()["top_k"] == 0


def test_a_single_stop_string_becomes_a_list():
    assert parse(stop="END").params.to_wire()["stop"] == ["END"]


def test_null_optional_fields_are_absent():
    request = parse(
        model=None, stop=None, temperature=None, max_tokens=None, stream=None, stream_options=None
    )
    assert request == ChatRequest(
        model=None, messages=HELLO, params=SamplingParams(**DEFAULT_PARAMS)
    )


def test_unknown_fields_are_ignored():
    assert (
        parse(user="u-1", tools=None, response_format={"type": "text"}).params.to_wire()
        == DEFAULT_PARAMS
    )


def text_part(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def test_roles_map_and_text_parts_join():
    body = {
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [text_part("a"), text_part("b")]},
            {"role": "assistant", "content": "ok", "name": "bot"},
        ]
    }
    assert BUILDER.parse(body).messages == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "ok"},
    ]


def test_stream_options_without_usage_is_false():
    request = parse(stream=True, stream_options={})
    assert (request.stream, request.include_usage) == (True, False)


# -- parse: what is refused ---------------------------------------------------------------

BAD_BODIES = [
    ([HELLO], None, "request body must be a JSON object"),
    ("hi", None, "request body must be a JSON object"),
    (None, None, "request body must be a JSON object"),
    ({}, "messages", "messages is required"),
    ({"messages": None}, "messages", "messages is required"),
    ({"messages": []}, "messages", "messages must not be empty"),
    ({"messages": "hi"}, "messages", "messages must be an array, got string"),
    ({"messages": ["hi"]}, "messages.0", "messages.0 must be an object, got string"),
    (
        {"messages": [{"role": "tool", "content": "x"}]},
        "messages.0.tool_call_id",
        "messages.0.tool_call_id is required in a tool message",
    ),
    ({"messages": [{"content": "x"}]}, "messages.0.role", "messages.0.role is required"),
    (
        {"messages": [{"role": "user"}]},
        "messages.0.content",
        "messages.0.content must be a string or an array of text parts, got null",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        "messages.0.content.0.type",
        'messages.0.content.0.type must be "text" (only text is supported), got "image_url"',
    ),
    (
        {"messages": [{"role": "user", "content": ["x"]}]},
        "messages.0.content.0",
        "messages.0.content.0 must be an object, got string",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
        "messages.0.content.0.text",
        "messages.0.content.0.text must be a string, got integer",
    ),
]

BAD_FIELDS = [
    ({"model": 3}, "model", "model must be a string, got integer"),
    ({"temperature": True}, "temperature", "temperature must be a number, got boolean"),
    ({"temperature": "0.5"}, "temperature", "temperature must be a number, got string"),
    ({"temperature": 2.5}, "temperature", "temperature must be in [0, 2], got 2.5"),
    ({"temperature": -0.1}, "temperature", "temperature must be in [0, 2], got -0.1"),
    ({"temperature": float("nan")}, "temperature", "temperature must be a finite number, got NaN"),
    (
        {"top_p": 10**30},
        "top_p",
        "top_p must be in (0, 1], got 1000000000000000000000000000000",
    ),
    (
        {"repetition_penalty": 10**400},
        "repetition_penalty",
        "repetition_penalty must be a finite number, got 1000000000000000000000000000000000000...",
    ),
    ({"top_p": 0}, "top_p", "top_p must be in (0, 1], got 0"),
    ({"top_p": 1.5}, "top_p", "top_p must be in (0, 1], got 1.5"),
    ({"top_k": -2}, "top_k", "top_k must be >= -1, got -2"),
    ({"top_k": 1.5}, "top_k", "top_k must be an integer, got number"),
    ({"min_p": 1.5}, "min_p", "min_p must be in [0, 1], got 1.5"),
    ({"max_tokens": 0}, "max_tokens", "max_tokens must be >= 1, got 0"),
    ({"max_tokens": 10.0}, "max_tokens", "max_tokens must be an integer, got number"),
    ({"max_tokens": True}, "max_tokens", "max_tokens must be an integer, got boolean"),
    (
        {"max_completion_tokens": -5},
        "max_completion_tokens",
        "max_completion_tokens must be >= 1, got -5",
    ),
    ({"min_tokens": -1}, "min_tokens", "min_tokens must be >= 0, got -1"),
    (
        {"min_tokens": 9, "max_tokens": 8},
        "min_tokens",
        "min_tokens must be <= max_tokens (8), got 9",
    ),
    ({"n": 0}, "n", "n must be in [1, 16], got 0"),
    ({"n": 17}, "n", "n must be in [1, 16], got 17"),
    ({"seed": "7"}, "seed", "seed must be an integer, got string"),
    (
        {"seed": 2**63},
        "seed",
        "seed must be in [-9223372036854775808, 9223372036854775807], got 9223372036854775808",
    ),
    ({"presence_penalty": 2.1}, "presence_penalty", "presence_penalty must be in [-2, 2], got 2.1"),
    (
        {"frequency_penalty": -3},
        "frequency_penalty",
        "frequency_penalty must be in [-2, 2], got -3",
    ),
    ({"repetition_penalty": 0}, "repetition_penalty", "repetition_penalty must be > 0, got 0"),
    ({"stop": ""}, "stop", "stop must be a non-empty string"),
    ({"stop": 5}, "stop", "stop must be a string or an array of strings, got integer"),
    ({"stop": ["a", ""]}, "stop.1", "stop.1 must be a non-empty string"),
    ({"stop": ["a", 1]}, "stop.1", "stop.1 must be a non-empty string"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "stop may hold at most 4 strings, got 5"),
    ({"stop": "x" * 501}, "stop", "stop must be at most 500 characters long, got 501"),
    (
        {"stop": ["a", "x" * 1_000_000]},
        "stop.1",
        "stop.1 must be at most 500 characters long, got 1000000",
    ),
    ({"stream": "yes"}, "stream", "stream must be a boolean, got string"),
    ({"stream": 1}, "stream", "stream must be a boolean, got integer"),
    (
        {"stream_options": {"include_usage": True}},
        "stream_options",
        "stream_options is only allowed when stream is true",
    ),
    (
        {"stream": False, "stream_options": {"include_usage": True}},
        "stream_options",
        "stream_options is only allowed when stream is true",
    ),
    (
        {"stream": True, "stream_options": True},
        "stream_options",
        "stream_options must be an object, got boolean",
    ),
    (
        {"stream": True, "stream_options": {"include_usage": "yes"}},
        "stream_options.include_usage",
        "stream_options.include_usage must be a boolean, got string",
    ),
    ({"logprobs": 1}, "logprobs", "logprobs must be a boolean, got integer"),
    ({"top_logprobs": 2}, "top_logprobs", "top_logprobs requires logprobs to be true"),
    (
        {"logprobs": False, "top_logprobs": 2},
        "top_logprobs",
        "top_logprobs requires logprobs to be true",
    ),
    (
        {"logprobs": True, "top_logprobs": 21},
        "top_logprobs",
        "top_logprobs must be in [0, 20], got 21",
    ),
    ({"ignore_eos": "true"}, "ignore_eos", "ignore_eos must be a boolean, got string"),
]


@pytest.mark.parametrize(("body", "param", "message"), BAD_BODIES)
def test_bad_body_or_messages_is_a_400(body, param, message):
    error = parse_error(body)
    assert (error.kind, error.param, error.message) == (ErrorKind.INVALID_REQUEST, param, message)


@pytest.mark.parametrize(("fields", "param", "message"), BAD_FIELDS)
def test_bad_field_is_a_400_naming_the_parameter(fields, param, message):
    error = parse_error({"messages": HELLO, **fields})
    assert (error.kind, error.param, error.message) == (ErrorKind.INVALID_REQUEST, param, message)


def function_tool(name: str = "f", **spec: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **spec}}


def assistant_call(arguments: Any) -> list[dict[str, Any]]:
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]}]


# Bodies that once reached the msgpack encoder (a 500) or were silently ignored: each is a
# 400 in OpenAI's shape naming the parameter by its path.
EDGE_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"max_tokens": 2**64}, "max_tokens"),
    ({"max_completion_tokens": 2**64}, "max_completion_tokens"),
    ({"top_k": 2**64}, "top_k"),
    ({"min_tokens": 2**64}, "min_tokens"),
    ({"seed": 2**64}, "seed"),
    ({"seed": -(2**63) - 1}, "seed"),
    ({"n": 2**64}, "n"),
    ({"logprobs": True, "top_logprobs": 2**64}, "top_logprobs"),
    ({"stop_token_ids": [2**64]}, "stop_token_ids.0"),
    ({"logit_bias": {"18446744073709551616": 1}}, "logit_bias"),
    (
        {"tools": [function_tool(parameters={"maxLength": 2**64})]},
        "tools.0.function.parameters.maxLength",
    ),
    ({"model": "\ud800"}, "model"),
    ({"messages": [{"role": "user", "content": "a\ud800"}]}, "messages.0.content"),
    (
        {"messages": [{"role": "user", "content": [text_part("\udfff")]}]},
        "messages.0.content.0.text",
    ),
    ({"stop": "\ud800"}, "stop"),
    ({"stop": ["ok", "\ud800"]}, "stop.1"),
    ({"tools": [function_tool("\ud800")]}, "tools.0.function.name"),
    ({"tools": [function_tool(description="\ud800")]}, "tools.0.function.description"),
    (
        {"tools": [function_tool(parameters={"type": "object", "title": "\ud800"})]},
        "tools.0.function.parameters.title",
    ),
    ({"messages": assistant_call("\ud800")}, "messages.0.tool_calls.0.function.arguments"),
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": float("inf")}, "top_p"),
    ({"presence_penalty": float("-inf")}, "presence_penalty"),
    ({"logit_bias": {"5": float("nan")}}, "logit_bias.5"),
    (
        {"response_format": {"type": "json_object", "x": float("nan")}},
        "response_format.x",
    ),
    ({"temperature": "0.5"}, "temperature"),
    ({"n": 2.0}, "n"),
    ({"messages": [{"role": "user", "content": {"text": "hi"}}]}, "messages.0.content"),
    ({"messages": assistant_call({"city": "Paris"})}, "messages.0.tool_calls.0.function.arguments"),
    ({"tools": [function_tool(parameters=[])]}, "tools.0.function.parameters"),
    ({"tool_choice": 3}, "tool_choice"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"prediction": {"type": "content", "content": "x"}}, "prediction"),
    ({"web_search_options": {}}, "web_search_options"),
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"function_call": "auto"}, "function_call"),
    ({"reasoning_effort": "high"}, "reasoning_effort"),
    ({"store": True}, "store"),
]


@pytest.mark.parametrize(("fields", "param"), EDGE_BODIES)
def test_edge_bodies_are_400s_in_openai_shape_naming_the_path(fields: dict[str, Any], param: str):
    error = parse_error({"messages": HELLO, **fields})
    status, body = BUILDER.error_body(error)
    assert (status, body["error"]["type"], body["error"]["param"]) == (
        400,
        "invalid_request_error",
        param,
    )
    assert body["error"]["message"].startswith(param)


def test_unimplemented_parameters_at_their_off_values_are_accepted():
    request = parse(store=False, modalities=["text"], audio=None, functions=None)
    assert request.params.to_wire() == DEFAULT_PARAMS


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)
FIELDS = [
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "n",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logprobs",
    "top_logprobs",
    "stream",
    "stream_options",
    "ignore_eos",
    "min_tokens",
]


@given(st.sampled_from(FIELDS), JSON)
def test_any_json_in_any_field_parses_or_is_a_400(key, value):
    try:
        request = BUILDER.parse({**{"messages": HELLO, "stream": True}, key: value})
    except GatewayError as error:
        assert (error.kind, error.param is not None) == (ErrorKind.INVALID_REQUEST, True)
    else:
        encode(request.submit("r"))  # what parses crosses msgpack: never a 500 after it


@given(JSON)
def test_any_json_body_is_a_400(body):
    # Generated keys are at most 5 characters, so the required "messages" is never present.
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse(body)
    assert caught.value.kind == ErrorKind.INVALID_REQUEST


# -- non-streamed bodies ------------------------------------------------------------------


def usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def test_response_for_one_choice():
    result = ChatResult(
        request_id="chatcmpl-abc",
        model="smol",
        created=1700000000,
        choices=[ChoiceResult(0, "Hello!", "stop", 2, completion_tokens=3)],
        prompt_tokens=9,
        cached_tokens=0,
    )
    assert BUILDER.format_response(result) == {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "smol",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage(9, 3, 0),
    }


def test_response_for_two_choices_is_sorted_by_index():
    result = ChatResult(
        request_id="chatcmpl-abc",
        model="smol",
        created=1700000000,
        choices=[
            ChoiceResult(1, "b b b b", "length", None, completion_tokens=4),
            ChoiceResult(0, "a", "stop", "END", completion_tokens=1),
        ],
        prompt_tokens=9,
        cached_tokens=8,
    )
    body = BUILDER.format_response(result)
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "a"},
            "logprobs": None,
            "finish_reason": "stop",
        },
        {
            "index": 1,
            "message": {"role": "assistant", "content": "b b b b"},
            "logprobs": None,
            "finish_reason": "length",
        },
    ]
    assert body["usage"] == usage(9, 5, 8)


HI_LOGPROBS = [
    TokenLogprob(39, "H", -0.25, (TopLogprob(39, "H", -0.25), TopLogprob(71, "h", -1.5))),
    TokenLogprob(3067, "é", -0.5, (TopLogprob(3067, "é", -0.5),)),
]
HI_LOGPROBS_JSON = {
    "content": [
        {
            "token": "H",
            "logprob": -0.25,
            "bytes": [72],
            "top_logprobs": [
                {"token": "H", "logprob": -0.25, "bytes": [72]},
                {"token": "h", "logprob": -1.5, "bytes": [104]},
            ],
        },
        {
            "token": "é",
            "logprob": -0.5,
            "bytes": [195, 169],
            "top_logprobs": [{"token": "é", "logprob": -0.5, "bytes": [195, 169]}],
        },
    ]
}


def test_response_with_logprobs():
    choice = ChoiceResult(0, "Hé", "length", None, list(HI_LOGPROBS), completion_tokens=2)
    result = ChatResult("chatcmpl-abc", "smol", 1700000000, [choice], prompt_tokens=3)
    assert BUILDER.format_response(result)["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hé"},
            "logprobs": HI_LOGPROBS_JSON,
            "finish_reason": "length",
        }
    ]


# -- streams ------------------------------------------------------------------------------


def run_stream(state: StreamState, pieces: list[tuple[int, str]], ends: list[ChoiceResult]):
    events = BUILDER.stream_start(state)
    for index, text in pieces:
        events += BUILDER.stream_tokens(state, index, text, [])
    for choice in ends:
        events += BUILDER.stream_choice_end(state, choice)
    return events + BUILDER.stream_end(state)


def test_two_token_stream_exact_bytes():
    state = make_state()
    events = run_stream(state, [(0, "Hel"), (0, "lo")], [ChoiceResult(0, "Hello", "stop")])
    head = '{"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,'
    head += '"model":"smol","choices":[{"index":0,"delta":'
    tail = ',"logprobs":null,"finish_reason":null}]}\n\n'
    assert events == [
        f'data: {head}{{"role":"assistant","content":""}}{tail}',
        f'data: {head}{{"content":"Hel"}}{tail}',
        f'data: {head}{{"content":"lo"}}{tail}',
        f'data: {head}{{}},"logprobs":null,"finish_reason":"stop"}}]}}\n\n',
        "data: [DONE]\n\n",
    ]


def test_two_token_stream_with_usage():
    state = make_state(include_usage=True)
    events = run_stream(state, [(0, "Hel"), (0, "lo")], [ChoiceResult(0, "Hello", "length")])
    assert data(events) == [
        chunk([delta(0, {"role": "assistant", "content": ""})], usage=None),
        chunk([delta(0, {"content": "Hel"})], usage=None),
        chunk([delta(0, {"content": "lo"})], usage=None),
        chunk([delta(0, {}, finish="length")], usage=None),
        chunk([], usage=usage(7, 2, 4)),
        "[DONE]",
    ]


def test_two_choices_interleave():
    state = make_state(n=2)
    events = run_stream(
        state,
        [(0, "a"), (1, "x"), (1, "y"), (0, "b")],
        [ChoiceResult(1, "xy", "length"), ChoiceResult(0, "ab", "stop")],
    )
    assert data(events) == [
        chunk([delta(0, {"role": "assistant", "content": ""})]),
        chunk([delta(1, {"role": "assistant", "content": ""})]),
        chunk([delta(0, {"content": "a"})]),
        chunk([delta(1, {"content": "x"})]),
        chunk([delta(1, {"content": "y"})]),
        chunk([delta(0, {"content": "b"})]),
        chunk([delta(1, {}, finish="length")]),
        chunk([delta(0, {}, finish="stop")]),
        "[DONE]",
    ]


def test_stream_tokens_carry_logprobs_and_skip_empty_pieces():
    state = make_state()
    assert BUILDER.stream_tokens(state, 0, "", []) == []
    events = BUILDER.stream_tokens(state, 0, "Hé", list(HI_LOGPROBS))
    assert data(events) == [chunk([delta(0, {"content": "Hé"}, HI_LOGPROBS_JSON)])]
    only_logprobs = BUILDER.stream_tokens(state, 0, "", HI_LOGPROBS[:1])
    logprobs = {"content": HI_LOGPROBS_JSON["content"][:1]}
    assert data(only_logprobs) == [chunk([delta(0, {"content": ""}, logprobs)])]


def test_error_mid_stream_ends_the_stream():
    state = make_state(include_usage=True)
    events = BUILDER.stream_start(state) + BUILDER.stream_tokens(state, 0, "Hel", [])
    events += BUILDER.stream_error(state, GatewayError(ErrorKind.UNAVAILABLE, "worker died"))
    assert data(events) == [
        chunk([delta(0, {"role": "assistant", "content": ""})], usage=None),
        chunk([delta(0, {"content": "Hel"})], usage=None),
        {
            "error": {
                "message": "worker died",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        },
        "[DONE]",
    ]


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "status", "error_type"),
    [
        (ErrorKind.INVALID_REQUEST, 400, "invalid_request_error"),
        (ErrorKind.AUTHENTICATION, 401, "authentication_error"),
        (ErrorKind.NOT_FOUND, 404, "invalid_request_error"),
        (ErrorKind.PAYLOAD_TOO_LARGE, 413, "invalid_request_error"),
        (ErrorKind.RATE_LIMITED, 429, "rate_limit_error"),
        (ErrorKind.UNAVAILABLE, 503, "server_error"),
        (ErrorKind.INTERNAL, 500, "server_error"),
    ],
)
def test_error_body_for_each_kind(kind, status, error_type):
    error = GatewayError(kind, "went wrong", param="model", code="model_not_found")
    assert BUILDER.error_body(error) == (
        status,
        {
            "error": {
                "message": "went wrong",
                "type": error_type,
                "param": "model",
                "code": "model_not_found",
            }
        },
    )


def test_names():
    assert (BUILDER.name, BUILDER.id_prefix) == ("openai", "chatcmpl-")


def test_module_does_not_import_torch_or_worker():
    code = (
        "import sys, gateway.protocols.openai\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'worker')]\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout == "[]\n"


def test_logit_bias_becomes_token_id_pairs():
    params = parse(logit_bias={"50": 5, "7": -100}).params.to_wire()
    assert params["logit_bias"] == [[50, 5.0], [7, -100.0]]


@pytest.mark.parametrize("bias", [{"x": 1}, {"5": 101}, {"5": "1"}, {"5": True}, [1]])
def test_bad_logit_bias_is_a_400_naming_it(bias: Any):
    error = parse_error({"messages": HELLO, "logit_bias": bias})
    assert error.kind == ErrorKind.INVALID_REQUEST and error.param.startswith("logit_bias")


def test_prompt_logprobs_are_asked_for_and_rendered_as_vllm_does():
    assert parse(prompt_logprobs=2).params.to_wire()["prompt_logprobs"] == 2
    assert parse_error({"messages": HELLO, "prompt_logprobs": 1, "stream": True}).param == (
        "prompt_logprobs"
    )
    assert parse_error({"messages": HELLO, "prompt_logprobs": 21}).param == "prompt_logprobs"
    prompt = [
        TokenLogprob(1, "<s>", None),
        TokenLogprob(9, " hi", -2.5, (TopLogprob(4, " a", -0.5), TopLogprob(9, " hi", -2.5)), 2),
    ]
    choice = ChoiceResult(0, "Hello!", "stop", 2, completion_tokens=3, prompt_logprobs=prompt)
    result = ChatResult("chatcmpl-abc", "smol", 1700000000, [choice], prompt_tokens=2)

    [rendered] = BUILDER.format_response(result)["choices"]

    assert rendered["prompt_logprobs"] == [
        None,
        {
            "4": {"logprob": -0.5, "rank": 1, "decoded_token": " a"},
            "9": {"logprob": -2.5, "rank": 2, "decoded_token": " hi"},
        },
    ]
