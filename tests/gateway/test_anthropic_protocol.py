"""AnthropicResponseBuilder: every parameter, every 400, exact bodies and exact SSE sequences."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.sampling_params import SamplingParams
from common.token_output import TokenLogprob
from common.wire import encode
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.anthropic import AnthropicResponseBuilder
from gateway.protocols.base import (
    ChatRequest,
    ChatResult,
    ChoiceResult,
    StreamState,
)

ROOT = Path(__file__).resolve().parents[2]
BUILDER = AnthropicResponseBuilder()
HELLO = [{"role": "user", "content": "hi"}]
REQUIRED = {"model": "smol", "max_tokens": 32, "messages": HELLO}
DEFAULT_PARAMS = {"max_tokens": 32, "clamp_max_tokens": True}  # the rest: SamplingParams defaults


def parse(**fields: Any) -> ChatRequest:
    return BUILDER.parse({**REQUIRED, **fields})


def parse_error(body: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse(body)
    return caught.value


def make_state() -> StreamState:
    request = ChatRequest(
        model="smol", messages=HELLO, params=SamplingParams(**DEFAULT_PARAMS), stream=True
    )
    return StreamState(
        request_id="msg_abc",
        model="smol",
        created=1700000000,
        request=request,
        prompt_tokens=7,
        cached_tokens=4,
        completion_tokens=2,
    )


def events_of(events: list[str]) -> list[tuple[str, Any]]:
    """Each `event: NAME\\ndata: JSON\\n\\n` as (NAME, decoded JSON)."""
    decoded = []
    for event in events:
        head, body = event.split("\n", 1)
        assert head.startswith("event: ") and body.startswith("data: "), event
        assert body.endswith("\n\n") and body.count("\n") == 2, event
        decoded.append((head[len("event: ") :], json.loads(body[len("data: ") : -2])))
    return decoded


def text_block(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


# -- parse: what is accepted --------------------------------------------------------------


def test_minimal_request_gets_explicit_defaults():
    assert parse() == ChatRequest(
        model="smol", messages=HELLO, params=SamplingParams(**DEFAULT_PARAMS)
    )


def test_every_parameter_lands_on_its_sampling_keyword():
    request = parse(
        system="be brief",
        temperature=0.2,
        top_p=0.8,
        top_k=20,
        stop_sequences=["\n\nHuman:", "END"],
        stream=True,
        metadata={"user_id": "u-1"},
    )
    assert request == ChatRequest(
        model="smol",
        messages=[{"role": "system", "content": "be brief"}, *HELLO],
        params=SamplingParams(
            temperature=0.2,
            top_p=0.8,
            top_k=20,
            max_tokens=32,
            clamp_max_tokens=True,
            stop=["\n\nHuman:", "END"],
        ),
        stream=True,
        metadata={"user_id": "u-1"},
    )


def test_system_blocks_and_content_blocks_join():
    request = parse(
        system=[text_block("one"), {**text_block("two"), "cache_control": {"type": "ephemeral"}}],
        messages=[
            {"role": "user", "content": [text_block("a"), text_block("b")]},
            {"role": "assistant", "content": "ok"},
        ],
    )
    assert request.messages == [
        {"role": "system", "content": "one\ntwo"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "ok"},
    ]


BILLING = "x-anthropic-billing-header: cc_version=2.1.332.1c9; cc_entrypoint=sdk-cli; cch=36ee5;"


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        ([text_block(BILLING), text_block("You are Claude Code.")], "You are Claude Code."),
        (f"{BILLING}\nYou are Claude Code.", "You are Claude Code."),
        ([text_block(BILLING)], None),  # nothing else: no system turn at all
        ("You are Claude Code.\n" + BILLING, "You are Claude Code.\n" + BILLING),  # not first
    ],
)
def test_claude_codes_leading_billing_line_is_not_part_of_the_prompt(system, expected):
    """Its hashes change per request: kept, no two requests would share a cached prefix."""
    request = parse(system=system)
    system_turns = [m["content"] for m in request.messages if m["role"] == "system"]
    assert system_turns == ([] if expected is None else [expected])


def test_null_optional_fields_and_unknown_fields():
    request = parse(
        system=None,
        temperature=None,
        stop_sequences=None,
        metadata=None,
        tools=None,
        thinking=None,
        citations=True,
    )
    assert request == ChatRequest(
        model="smol", messages=HELLO, params=SamplingParams(**DEFAULT_PARAMS)
    )


def test_temperature_zero_is_kept():
    assert parse(temperature=0).params.to_wire()["temperature"] == 0.0


# -- parse: what is refused ---------------------------------------------------------------

BAD_REQUESTS = [
    ([REQUIRED], None, "request body must be a JSON object"),
    ("hi", None, "request body must be a JSON object"),
    (None, None, "request body must be a JSON object"),
    ({"max_tokens": 32, "messages": HELLO}, "model", "model is required"),
    ({"model": "", "max_tokens": 32, "messages": HELLO}, "model", "model must not be empty"),
    (
        {"model": 1, "max_tokens": 32, "messages": HELLO},
        "model",
        "model must be a string, got integer",
    ),
    ({"model": "smol", "messages": HELLO}, "max_tokens", "max_tokens is required"),
    ({**REQUIRED, "max_tokens": 0}, "max_tokens", "max_tokens must be >= 1, got 0"),
    ({**REQUIRED, "max_tokens": "8"}, "max_tokens", "max_tokens must be an integer, got string"),
    ({**REQUIRED, "max_tokens": True}, "max_tokens", "max_tokens must be an integer, got boolean"),
    ({"model": "smol", "max_tokens": 32}, "messages", "messages is required"),
    ({**REQUIRED, "messages": []}, "messages", "messages must not be empty"),
    ({**REQUIRED, "messages": {}}, "messages", "messages must be an array, got object"),
    (
        {**REQUIRED, "messages": [{"role": "tool", "content": "x"}]},
        "messages.0.role",
        "messages.0.role must be 'user', 'assistant' or 'system', got \"tool\"",
    ),
    (
        {**REQUIRED, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
        "messages.0.content.0.type",
        'messages.0.content.0.type "image" is not supported in a user turn',
    ),
    (
        {**REQUIRED, "messages": [{"role": "user", "content": 5}]},
        "messages.0.content",
        "messages.0.content must be a string or an array of content blocks, got integer",
    ),
    (
        {**REQUIRED, "system": 5},
        "system",
        "system must be a string or an array of text parts, got integer",
    ),
    (
        {**REQUIRED, "system": [{"type": "image"}]},
        "system.0.type",
        'system.0.type must be "text" (only text is supported), got "image"',
    ),
    ({**REQUIRED, "temperature": 1.5}, "temperature", "temperature must be in [0, 1], got 1.5"),
    (
        {**REQUIRED, "temperature": False},
        "temperature",
        "temperature must be a number, got boolean",
    ),
    ({**REQUIRED, "top_p": 0}, "top_p", "top_p must be in (0, 1], got 0"),
    ({**REQUIRED, "top_k": -1}, "top_k", "top_k must be >= 0, got -1"),
    ({**REQUIRED, "top_k": 2.5}, "top_k", "top_k must be an integer, got number"),
    (
        {**REQUIRED, "stop_sequences": "END"},
        "stop_sequences",
        "stop_sequences must be an array of strings, got string",
    ),
    (
        {**REQUIRED, "stop_sequences": ["END", ""]},
        "stop_sequences.1",
        "stop_sequences.1 must be a non-empty string",
    ),
    (
        {**REQUIRED, "stop_sequences": ["x"] * 17},
        "stop_sequences",
        "stop_sequences may hold at most 16 strings, got 17",
    ),
    (
        {**REQUIRED, "stop_sequences": ["x" * 1_000_000]},
        "stop_sequences.0",
        "stop_sequences.0 must be at most 500 characters long, got 1000000",
    ),
    ({**REQUIRED, "stream": "true"}, "stream", "stream must be a boolean, got string"),
    ({**REQUIRED, "metadata": []}, "metadata", "metadata must be an object, got array"),
]


@pytest.mark.parametrize(("body", "param", "message"), BAD_REQUESTS)
def test_bad_request_is_a_400_naming_the_parameter(body, param, message):
    error = parse_error(body)
    assert (error.kind, error.param, error.message) == (ErrorKind.INVALID_REQUEST, param, message)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)
FIELDS = [
    "model",
    "max_tokens",
    "messages",
    "system",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "stream",
    "metadata",
]


@given(st.sampled_from(FIELDS), JSON)
def test_any_json_in_any_field_parses_or_is_a_400(key, value):
    try:
        request = BUILDER.parse({**REQUIRED, key: value})
    except GatewayError as error:
        assert (error.kind, error.param is not None) == (ErrorKind.INVALID_REQUEST, True)
    else:
        encode(request.submit("r"))  # what parses crosses msgpack: never a 500 after it


def user(*blocks: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


def tool_use(**fields: Any) -> list[dict[str, Any]]:
    block = {"type": "tool_use", "id": "t1", "name": "f", "input": {}, **fields}
    return [*HELLO, {"role": "assistant", "content": [block]}]


def tool_result(**fields: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": "t1", "content": "18C", **fields}


def tool(**fields: Any) -> dict[str, Any]:
    return {"name": "f", "input_schema": {"type": "object"}, **fields}


# Bodies that once reached the msgpack encoder (a 500) or were silently ignored: each is a
# 400 in Anthropic's shape whose message starts with the parameter's path.
EDGE_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"max_tokens": 2**64}, "max_tokens"),
    ({"top_k": 2**64}, "top_k"),
    ({"model": "\ud800"}, "model"),
    ({"system": "\ud800"}, "system"),
    ({"system": [text_block("ok"), text_block("\udfff")]}, "system.1.text"),
    ({"messages": [{"role": "user", "content": "\ud800"}]}, "messages.0.content"),
    ({"messages": user(text_block("\ud800"))}, "messages.0.content.0.text"),
    ({"messages": user(tool_result(content="\ud800"))}, "messages.0.content.0.content"),
    ({"messages": user(tool_result(tool_use_id="\ud800"))}, "messages.0.content.0.tool_use_id"),
    ({"messages": tool_use(name="\ud800")}, "messages.1.content.0.name"),
    ({"messages": tool_use(input={"n": 2**64})}, "messages.1.content.0.input.n"),
    ({"messages": tool_use(input={"x": float("nan")})}, "messages.1.content.0.input.x"),
    ({"messages": user(tool_result(is_error="yes"))}, "messages.0.content.0.is_error"),
    ({"messages": user({"type": "text"})}, "messages.0.content.0.text"),
    ({"messages": user({"type": "tool_result"})}, "messages.0.content.0.tool_use_id"),
    ({"stop_sequences": ["\ud800"]}, "stop_sequences.0"),
    ({"tools": [tool(name="\ud800")]}, "tools.0.name"),
    ({"tools": [tool(description="\ud800")]}, "tools.0.description"),
    ({"tools": [tool(input_schema={"maxItems": 2**64})]}, "tools.0.input_schema.maxItems"),
    ({"tools": [tool()], "tool_choice": {"type": "tool", "name": "\ud800"}}, "tool_choice.name"),
    ({"metadata": {"user_id": "\ud800"}}, "metadata.user_id"),
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": float("inf")}, "top_p"),
    ({"temperature": "1"}, "temperature"),
    (
        {"output_config": {"format": {"type": "json_schema", "schema": {"x": float("inf")}}}},
        "output_config.format.schema.x",
    ),
    (
        {"tools": [tool()], "tool_choice": {"type": "auto", "disable_parallel_tool_use": "no"}},
        "tool_choice.disable_parallel_tool_use",
    ),
    ({"thinking": {"type": "enabled", "budget_tokens": 1023}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "on"}}, "thinking.type"),
    ({"thinking": {"type": "adaptive", "display": "full"}}, "thinking.display"),
    ({"container": "c-1"}, "container"),
    ({"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]}, "mcp_servers"),
    ({"context_management": {"edits": [{"type": "compact"}]}}, "context_management.edits.0.type"),
    (
        {"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": 2}]}},
        "context_management.edits.0.keep",
    ),
    ({"context_management": {"edits": "all"}}, "context_management.edits"),
    ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
    ({"output_config": {"task": "x"}}, "output_config.task"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
    (
        {
            "messages": [
                {"role": "system", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
            ]
        },
        "messages.0.content.0.type",
    ),
    (
        {"messages": [{"role": "assistant", "content": [{"type": "thinking"}]}]},
        "messages.0.content.0.thinking",
    ),
    ({"tools": [tool(input_examples=[1])]}, "tools.0.input_examples.0"),
    ({"tools": [tool(defer_loading="yes")]}, "tools.0.defer_loading"),
]


@pytest.mark.parametrize(("fields", "param"), EDGE_BODIES)
def test_edge_bodies_are_400s_in_anthropic_shape_naming_the_path(
    fields: dict[str, Any], param: str
):
    error = parse_error({**REQUIRED, **fields})
    assert error.param == param
    status, body = BUILDER.error_body(error)
    assert (status, body["type"], body["error"]["type"]) == (400, "error", "invalid_request_error")
    assert body["error"]["message"].startswith(param)


@given(JSON)
def test_any_json_body_is_a_400(body):
    # Generated keys are at most 5 characters, so the required "messages" is never present.
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse(body)
    assert caught.value.kind == ErrorKind.INVALID_REQUEST


# -- non-streamed bodies ------------------------------------------------------------------


def result_with(choice: ChoiceResult) -> ChatResult:
    return ChatResult("msg_abc", "smol", 1700000000, [choice], prompt_tokens=9, cached_tokens=6)


@pytest.mark.parametrize(
    ("finish_reason", "stop", "stop_reason", "stop_sequence"),
    [
        ("stop", None, "end_turn", None),
        ("stop", 2, "end_turn", None),
        ("stop", "END", "stop_sequence", "END"),
        ("length", None, "max_tokens", None),
    ],
)
def test_response_body(finish_reason, stop, stop_reason, stop_sequence):
    choice = ChoiceResult(0, "Hello!", finish_reason, stop, completion_tokens=3)
    assert BUILDER.format_response(result_with(choice)) == {
        "id": "msg_abc",
        "type": "message",
        "role": "assistant",
        "model": "smol",
        "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": {
            "input_tokens": 3,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 6,
            "output_tokens": 3,
        },
    }


# -- streams ------------------------------------------------------------------------------

MESSAGE_START = (
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "msg_abc",
            "type": "message",
            "role": "assistant",
            "model": "smol",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 7, "output_tokens": 0},
        },
    },
)
BLOCK_START = (
    "content_block_start",
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
)


def text_delta(text: str) -> tuple[str, Any]:
    delta = {"type": "text_delta", "text": text}
    return ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})


def stream_of(choice: ChoiceResult) -> list[str]:
    state = make_state()
    events = BUILDER.stream_start(state)
    events += BUILDER.stream_tokens(state, 0, "Hel", [])
    events += BUILDER.stream_tokens(state, 0, "", [TokenLogprob(2, "", -0.1)])
    events += BUILDER.stream_tokens(state, 0, "lo", [])
    events += BUILDER.stream_choice_end(state, choice)
    return events + BUILDER.stream_end(state)


@pytest.mark.parametrize(
    ("finish_reason", "stop", "stop_reason", "stop_sequence"),
    [
        ("stop", 2, "end_turn", None),
        ("length", None, "max_tokens", None),
        ("stop", "END", "stop_sequence", "END"),
    ],
)
def test_full_stream(finish_reason, stop, stop_reason, stop_sequence):
    choice = ChoiceResult(0, "Hello", finish_reason, stop, completion_tokens=2)
    assert events_of(stream_of(choice)) == [
        MESSAGE_START,
        BLOCK_START,
        text_delta("Hel"),
        text_delta("lo"),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                "usage": {
                    "input_tokens": 7 - 4,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 4,
                    "output_tokens": 2,
                },
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_stream_exact_bytes():
    state = make_state()
    assert BUILDER.stream_tokens(state, 0, "Hel", []) == [
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"text","text":""}}\n\n',
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"Hel"}}\n\n',
    ]
    assert BUILDER.stream_end(state) == ['event: message_stop\ndata: {"type":"message_stop"}\n\n']


def test_error_mid_stream():
    state = make_state()
    events = BUILDER.stream_start(state) + BUILDER.stream_tokens(state, 0, "Hel", [])
    events += BUILDER.stream_error(state, GatewayError(ErrorKind.UNAVAILABLE, "worker died"))
    assert events_of(events) == [
        MESSAGE_START,
        BLOCK_START,
        text_delta("Hel"),
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "worker died"}},
        ),
    ]


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "status", "error_type"),
    [
        (ErrorKind.INVALID_REQUEST, 400, "invalid_request_error"),
        (ErrorKind.AUTHENTICATION, 401, "authentication_error"),
        (ErrorKind.NOT_FOUND, 404, "not_found_error"),
        (ErrorKind.PAYLOAD_TOO_LARGE, 413, "request_too_large"),
        (ErrorKind.RATE_LIMITED, 529, "overloaded_error"),
        (ErrorKind.UNAVAILABLE, 529, "overloaded_error"),
        (ErrorKind.INTERNAL, 500, "api_error"),
    ],
)
def test_error_body_for_each_kind(kind, status, error_type):
    error = GatewayError(kind, "went wrong", param="model", code="model_not_found")
    assert BUILDER.error_body(error) == (
        status,
        {"type": "error", "error": {"type": error_type, "message": "went wrong"}},
    )


def test_names():
    assert (BUILDER.name, BUILDER.id_prefix) == ("anthropic", "msg_")


def test_module_does_not_import_torch_or_worker():
    code = (
        "import sys, gateway.protocols.anthropic\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'worker')]\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout == "[]\n"


def test_a_final_assistant_turn_is_a_prefill_to_continue():
    prefill = [{"role": "user", "content": "JSON"}, {"role": "assistant", "content": "{"}]
    assert parse(messages=prefill).params.to_wire()["continue_final_message"] is True
    assert "continue_final_message" not in parse().params.to_wire()
