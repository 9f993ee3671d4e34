"""SamplingParams and the neutral chat: the one contract both sides build, with one set of rules."""

from typing import Any

import msgpack
import pytest

from common.chat import normalize_messages
from common.errors import RequestError
from common.sampling_params import SamplingParams

TOOL = {"name": "get_weather", "parameters": {"type": "object"}, "strict": None}


def test_defaults_are_off_on_every_filter():
    params = SamplingParams()
    assert (params.temperature, params.top_k, params.top_p, params.min_p) == (1.0, 0, 1.0, 0.0)
    assert (params.max_tokens, params.n, params.stop, params.tool_choice) == (None, 1, (), "auto")


def test_top_k_minus_one_means_off_as_zero_does():
    assert SamplingParams(top_k=-1).top_k == 0


def test_none_means_the_default():
    assert SamplingParams(max_tokens=None, stop=None, seed=None) == SamplingParams()


def test_the_wire_form_holds_what_was_set_and_round_trips_through_msgpack():
    params = SamplingParams(
        temperature=0,
        stop="END",
        stop_token_ids=[2],
        logit_bias=[[5, -100]],
        tools=[TOOL],
        tool_choice={"name": "get_weather"},
        structured_output={"type": "json_object"},
    )
    wire = params.to_wire()
    assert wire == {
        "temperature": 0.0,
        "stop": ["END"],
        "stop_token_ids": [2],
        "logit_bias": [[5, -100.0]],
        "tools": [TOOL],
        "tool_choice": {"name": "get_weather"},
        "structured_output": {"type": "json_object"},
    }
    decoded = msgpack.unpackb(msgpack.packb(wire, use_bin_type=True), raw=False)
    assert SamplingParams.from_wire(decoded) == params


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"temperature": -0.5}, "temperature", "temperature must be >= 0, got -0.5"),
    ({"temperature": float("nan")}, "temperature", "temperature must be a finite number, got NaN"),
    ({"temperature": "1"}, "temperature", "temperature must be a number, got string"),
    ({"top_k": -2}, "top_k", "top_k must be >= -1 (-1 and 0 mean off), got -2"),
    ({"top_k": 2**64}, "top_k", "top_k must be at most 2147483647, got 18446744073709551616"),
    ({"top_k": 1.0}, "top_k", "top_k must be an integer, got number"),
    ({"top_p": 0}, "top_p", "top_p must be in (0, 1], got 0"),
    ({"max_tokens": 0}, "max_tokens", "max_tokens must be >= 1, got 0"),
    ({"max_tokens": True}, "max_tokens", "max_tokens must be an integer, got boolean"),
    (
        {"min_tokens": 5, "max_tokens": 4},
        "min_tokens",
        "min_tokens must be <= max_tokens (4), got 5",
    ),
    (
        {"seed": 2**63},
        "seed",
        "seed must be in [-9223372036854775808, 9223372036854775807], got 9223372036854775808",
    ),
    ({"n": 17}, "n", "n must be in [1, 16], got 17"),
    ({"stop": ["a", ""]}, "stop.1", "stop.1 must not be empty"),
    ({"stop": ["x"] * 17}, "stop", "stop may hold at most 16 strings, got 17"),
    (
        {"stop": ["a", "x" * 501]},
        "stop.1",
        "stop.1 must be at most 500 characters long, got 501",
    ),
    (
        {"stop": ["\ud800"]},
        "stop.0",
        "stop.0 must be valid Unicode text: it holds a lone surrogate (\\ud800), "
        "which cannot be encoded as UTF-8",
    ),
    (
        {"stop_token_ids": [-1]},
        "stop_token_ids.0",
        "stop_token_ids.0 must be a token id (an integer >= 0), got -1",
    ),
    (
        {"logit_bias": [[5, 101]]},
        "logit_bias.0",
        "logit_bias.0 must be a [token id, bias in [-100, 100]] pair, got [5, 101]",
    ),
    ({"tools": [{"parameters": {}}]}, "tools.0.name", "tools.0.name must be a string, got null"),
    (
        {"tools": [{**TOOL, "parameters": {"maximum": 2**64}}]},
        "tools.0.parameters.maximum",
        "tools.0.parameters.maximum must be a 64-bit integer, got 18446744073709551616",
    ),
    (
        {"tool_choice": "any"},
        "tool_choice",
        'tool_choice must be one of none, auto, required or {"name": …}, got "any"',
    ),
    (
        {"structured_output": {"type": "xml"}},
        "structured_output",
        "structured_output must be an object whose type is one of json_object, json_schema",
    ),
    ({"ignore_eos": 1}, "ignore_eos", "ignore_eos must be a boolean, got integer"),
    ({"beam_width": 4}, "beam_width", "unknown sampling parameter 'beam_width'"),
]


@pytest.mark.parametrize(("kwargs", "param", "message"), BAD)
def test_a_bad_setting_is_a_request_error_naming_its_path(kwargs, param, message):
    with pytest.raises(RequestError) as caught:
        SamplingParams(**kwargs)
    assert (caught.value.param, str(caught.value)) == (param, message)


def test_text_parts_join_with_newlines_and_tool_turns_are_kept():
    messages = [
        {
            "role": "system",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "1", "name": "f", "arguments": "{}"}],
        },
        {"role": "tool", "content": "18C", "tool_call_id": "1", "name": "ignored"},
    ]
    assert normalize_messages(messages) == [
        {"role": "system", "content": "a\nb"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "1", "name": "f", "arguments": "{}"}],
        },
        {"role": "tool", "content": "18C", "tool_call_id": "1"},
    ]


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ([{"role": "wizard", "content": "x"}], "messages.0.role"),
        ([{"role": "user", "content": None}], "messages.0.content"),
        (
            [{"role": "user", "content": "ok"}, {"role": "user", "content": "\ud800"}],
            "messages.1.content",
        ),
        ([{"role": "user", "content": [{"type": "image"}]}], "messages.0.content.0.type"),
        (
            [{"role": "assistant", "content": "", "tool_calls": [{"arguments": "{}"}]}],
            "messages.0.tool_calls.0.name",
        ),
    ],
)
def test_bad_messages_are_request_errors_naming_their_path(messages, param):
    with pytest.raises(RequestError) as caught:
        normalize_messages(messages)
    assert caught.value.param == param and str(caught.value).startswith(param)
