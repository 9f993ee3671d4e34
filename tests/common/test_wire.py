"""Wire codec: every message round-trips; bad frames are WireErrors with a reason, never crashes."""

import contextlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.schemas import (
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    Abort,
    Accepted,
    Finished,
    GatewayBeat,
    Heartbeat,
    Register,
    Rejected,
    Submit,
    Tokenize,
    Tokenized,
    Tokens,
)
from common.wire import DropCounter, WireError, decode, encode

EXAMPLES = [
    Register("w0", "inc", "SmolLM2", 8192, 64, 2912, 16, 1234, "host"),
    Heartbeat("w0", "inc", 1, 2, 100, 2912, 32, {"total_tasks": 3}, draining=True),
    Accepted("req-1", 37),
    Rejected("req-1", "context_length_exceeded", "prompt is too long", "messages"),
    Tokens("req-1", 0, "Hello", [9906], [[9906, "Hello", -0.1, [[9906, "Hello", -0.1]]]]),
    Tokens("req-1", 1, "", [2]),
    Tokens("req-1", 0, "", [7], tool_calls=[[0, "ab12", "get_weather", ""], [0, None, None, "{}"]]),
    Finished("req-1", 0, "stop", 37, 8, 16, stop="\n\n"),
    Finished("req-1", 0, "stop", 37, 8, 0, stop=2),
    Finished("req-1", 0, "error", 37, 0, 0, error="device lost"),
    Submit(
        "req-1", {"temperature": 0.0, "stop": ["x"]}, messages=[{"role": "user", "content": "Hi"}]
    ),
    Submit("req-2", {}, prompt="raw text"),
    Submit("req-3", {"n": 2}, prompts=["raw text", [1, 2, 3]], echo=True),
    Abort("req-1"),
    Tokenize("tok-1", {"tools": [{"name": "f"}]}, messages=[{"role": "user", "content": "hi"}]),
    Tokenize("tok-2", {}, token_ids=[1, 2, 3]),
    Tokenized("tok-1", [5, 6], max_context=8192),
    Tokenized("tok-2", [1, 2, 3], text="abc"),
    GatewayBeat("gw-1"),
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: m.tag)
def test_round_trip(message):
    assert decode(encode(message)) == message


def test_every_message_type_has_an_example():
    assert {m.tag for m in EXAMPLES} == set(MESSAGE_TYPES)


def frame(body) -> bytes:
    return msgpack.packb(body, use_bin_type=True)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xc1", "malformed"),  # a byte msgpack never uses
        (b"", "malformed"),
        (frame([1, 2, 3]), "malformed"),
        (frame({"t": "abort", "v": PROTOCOL_VERSION + 1, "request_id": "r"}), "version"),
        (frame({"t": "launch", "v": PROTOCOL_VERSION}), "unknown"),
        (frame({"t": "abort", "v": PROTOCOL_VERSION}), "malformed"),  # lacks request_id
        (frame({"t": "abort", "v": PROTOCOL_VERSION, "request_id": 7}), "malformed"),
        (
            frame(
                {"t": "accepted", "v": PROTOCOL_VERSION, "request_id": "r", "prompt_tokens": True}
            ),
            "malformed",
        ),
        (
            frame(
                {
                    "t": "tokens",
                    "v": PROTOCOL_VERSION,
                    "request_id": "r",
                    "index": 0,
                    "text": "x",
                    "token_ids": ["a"],
                }
            ),
            "malformed",
        ),
        (frame({1: "x"}), "malformed"),  # non-string map keys
        (
            frame(
                {
                    "t": "submit",
                    "v": PROTOCOL_VERSION,
                    "request_id": "r",
                    "params": {},
                    "prompts": [[1, "two"]],
                }
            ),
            "malformed",
        ),  # a token-id prompt holding a string
        (
            frame(
                {
                    "t": "submit",
                    "v": PROTOCOL_VERSION,
                    "request_id": "r",
                    "params": {},
                    "prompts": "one prompt",
                }
            ),
            "malformed",
        ),  # prompts is always a list
    ],
)
def test_bad_frames_are_wire_errors(raw: bytes, reason: str):
    with pytest.raises(WireError) as info:
        decode(raw)
    assert info.value.reason == reason


def test_oversized_frames_are_refused_before_parsing():
    big = encode(Tokens("r", 0, "x" * 2000, [1]))
    with pytest.raises(WireError) as info:
        decode(big, max_bytes=1000)
    assert info.value.reason == "oversized"


def test_unknown_extra_fields_are_ignored_for_forward_compatibility():
    body = {"t": "abort", "v": PROTOCOL_VERSION, "request_id": "r", "added_in_v2": 1}
    assert decode(frame(body)) == Abort("r")


def test_drop_counter_counts_by_reason():
    drops = DropCounter()
    assert drops.decode(b"\xc1") is None
    assert drops.decode(frame({"t": "nope", "v": PROTOCOL_VERSION})) is None
    assert drops.decode(encode(Abort("r"))) == Abort("r")
    assert dict(drops.counts) == {"malformed": 1, "unknown": 1}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_wire_error(raw: bytes):
    with contextlib.suppress(WireError):
        decode(raw)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["t", "v", "request_id", "index", "text", "token_ids", "params"]),
        st.one_of(
            st.none(),
            st.integers(-(2**63), 2**64 - 1),  # what msgpack can encode
            st.text(max_size=5),
            st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
        ),
    )
)
def test_random_maps_never_raise_anything_but_wire_error(body):
    with contextlib.suppress(WireError):
        decode(frame(body))
