"""Wire codec: every message round-trips; bad frames are WireErrors with a reason, never crashes."""

import contextlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.embedding import EmbedSettings, pack_vector
from common.errors import RejectCode
from common.rerank import RerankSettings
from common.sampling_params import SamplingParams
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
from common.token_output import FinishReason, TokenLogprob, ToolCallDelta, TopLogprob
from common.wire import DropCounter, WireError, WireRefusal, decode, encode
from common.worker_stats import WorkerStats

HELLO = TokenLogprob(
    9906, "Hello", -0.1, (TopLogprob(9906, "Hello", -0.1), TopLogprob(13, ".", -2.5))
)

EXAMPLES = [
    Register("w0", "inc", "SmolLM2", 8192, 64, 2912, 16, 1234, "host"),
    Register("w0", "inc", "SmolLM2", 8192, 64, 2912, 16, 1234, "host", ("claude-*", "m")),
    BEAT := Heartbeat(
        "w0",
        "inc",
        1,
        2,
        100,
        2912,
        32,
        WorkerStats(total_tasks=3, kv_pages_free=90, grammar_mask_seconds=0.25),
        draining=True,
    ),
    Heartbeat("w0", "inc", 0, 0, 100, 100, 0),  # no figures
    Accepted("req-1", 37),
    Rejected("req-1", RejectCode.CONTEXT_LENGTH_EXCEEDED, "prompt is too long", "messages"),
    LOGPROBS := Tokens("req-1", 0, "Hello", [9906], [HELLO, TokenLogprob(2, "", -0.5)]),
    Tokens("req-1", 1, "", [2]),
    Tokens("req-1", 0, "Hi", [5, 6], reasoning="so,"),  # a reasoning model's thoughts
    Tokens(  # the first tokens of a choice that asked for its prompt's logprobs
        "req-1",
        2,
        "!",
        [0],
        prompt_logprobs=[TokenLogprob(9906, "Hello", None), TokenLogprob(13, ".", -2.5, rank=3)],
    ),
    TOOL_CALLS := Tokens(
        "req-1",
        0,
        "",
        [7],
        tool_calls=[
            ToolCallDelta(0, "ab12", "get_weather", ""),
            ToolCallDelta(0, None, None, "{}"),
        ],
    ),
    Finished("req-1", 0, FinishReason.STOP, 37, 8, 16, stop="\n\n"),
    CALLS_END := Finished("req-1", 0, FinishReason.TOOL_CALLS, 37, 8, 0, stop=2),
    Finished("req-1", 0, FinishReason.ERROR, 37, 0, 0, error="device lost"),
    SUBMIT := Submit(
        "req-1",
        SamplingParams(temperature=0.0, stop=["x"]),
        messages=[{"role": "user", "content": "Hi"}],
    ),
    Submit("req-2", SamplingParams(), prompt="raw text"),
    Submit("req-3", SamplingParams(n=2), prompts=["raw text", [1, 2, 3]], echo=True),
    EMBED := Submit("embd-1", SamplingParams(), prompts=["a", [1, 2]], embed=EmbedSettings(8)),
    Submit("embd-2", SamplingParams(), prompts=["a"], embed=EmbedSettings()),
    VECTOR := Finished("embd-1", 1, FinishReason.STOP, 2, 0, 0, embedding=pack_vector([0.5, -1])),
    RERANK := Submit(
        "rerank-1", SamplingParams(), prompts=["doc", ""], rerank=RerankSettings("q", "task", 9)
    ),
    Submit("rerank-2", SamplingParams(), prompts=["doc"], rerank=RerankSettings("q")),
    SCORE := Finished("rerank-1", 1, FinishReason.STOP, 70, 0, 60, score=0.25),
    Abort("req-1"),
    Tokenize(
        "tok-1",
        SamplingParams(tools=[{"name": "f"}]),
        messages=[{"role": "user", "content": "hi"}],
    ),
    Tokenize("tok-2", SamplingParams(), token_ids=[1, 2, 3]),
    Tokenized("tok-1", [5, 6], max_context=8192),
    Tokenized("tok-2", [1, 2, 3], text="abc"),
    GatewayBeat("gw-1"),
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: m.tag)
def test_round_trip(message):
    assert decode(encode(message)) == message


def test_structs_and_enums_come_back_as_their_types():
    tokens = decode(encode(LOGPROBS))
    assert isinstance(tokens, Tokens) and tokens.logprobs is not None
    assert type(tokens.logprobs[0]) is TokenLogprob
    assert type(tokens.logprobs[0].top) is tuple and type(tokens.logprobs[0].top[1]) is TopLogprob
    calls = decode(encode(TOOL_CALLS))
    assert isinstance(calls, Tokens) and calls.tool_calls is not None
    assert type(calls.tool_calls[0]) is ToolCallDelta
    finished = decode(encode(Finished("r", 0, "length", 1, 1, 0)))  # a plain str is sent as is
    assert isinstance(finished, Finished) and finished.finish_reason is FinishReason.LENGTH
    rejected = decode(encode(Rejected("r", RejectCode.DRAINING, "bye")))
    assert isinstance(rejected, Rejected) and rejected.code is RejectCode.DRAINING
    heartbeat = decode(encode(BEAT))
    assert isinstance(heartbeat, Heartbeat) and type(heartbeat.stats) is WorkerStats


def test_sampling_params_cross_as_the_map_of_the_settings_given_and_come_back_typed():
    body = msgpack.unpackb(encode(SUBMIT))
    assert body["params"] == {"temperature": 0.0, "stop": ["x"]}
    submit = decode(encode(SUBMIT))
    assert isinstance(submit, Submit) and type(submit.params) is SamplingParams
    assert submit.params.stop == ("x",) and submit.params.model_fields_set == {
        "temperature",
        "stop",
    }


def test_settings_the_rules_refuse_are_a_refusal_naming_the_request_and_parameter():
    frame = msgpack.packb(
        {"t": "submit", "v": PROTOCOL_VERSION, "request_id": "r-9", "params": {"top_p": 0}}
    )
    with pytest.raises(WireRefusal) as refused:
        decode(frame)
    assert (refused.value.request_id, refused.value.param) == ("r-9", "top_p")
    assert refused.value.code is RejectCode.INVALID_REQUEST and "top_p" in refused.value.message
    counter = DropCounter()
    with pytest.raises(WireRefusal):  # a receiver of requests answers it
        counter.decode(frame, refusals=True)
    assert not counter.counts
    assert counter.decode(frame) is None  # anyone else drops it, counted
    assert counter.counts == {"refused": 1}


def test_a_struct_crosses_as_the_list_of_its_fields():
    """The compact form documented in common/wire.py: one token's logprobs, ~30 bytes."""
    body = msgpack.unpackb(encode(LOGPROBS))
    assert body["logprobs"] == [
        [9906, "Hello", -0.1, [[9906, "Hello", -0.1], [13, ".", -2.5]], None],
        [2, "", -0.5, [], None],
    ]
    assert body["t"] == "tokens" and body["v"] == PROTOCOL_VERSION
    finished = msgpack.unpackb(encode(CALLS_END))
    assert finished["finish_reason"] == "tool_calls"


def test_an_embedding_request_and_its_vector_cross_compactly():
    """Submit.embed is the list of its fields; a vector is one msgpack bin of float32s."""
    assert msgpack.unpackb(encode(EMBED))["embed"] == [8]
    raw = msgpack.unpackb(encode(VECTOR), raw=False)["embedding"]
    assert raw == b"\x00\x00\x00\x3f\x00\x00\x80\xbf"  # 0.5 and -1.0, little-endian


def test_a_rerank_request_and_its_score_cross_as_their_fields():
    """Submit.rerank is the list of its fields; a score is one msgpack float."""
    assert msgpack.unpackb(encode(RERANK))["rerank"] == ["q", "task", 9]
    assert msgpack.unpackb(encode(SCORE))["score"] == 0.25


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


def tokens_with(**fields) -> bytes:
    body = {"t": "tokens", "v": PROTOCOL_VERSION, "request_id": "r", "index": 0, "text": "x"}
    return frame({**body, "token_ids": [1], **fields})


@pytest.mark.parametrize(
    "raw",
    [
        tokens_with(logprobs=[[1, "x", -0.1]]),  # a field short
        tokens_with(logprobs=[[1, "x", -0.1, [], "extra"]]),  # a field long
        tokens_with(logprobs=[[1, "x", "-0.1", []]]),  # logprob as text
        tokens_with(logprobs=[[1, "x", -0.1, [[1, "x"]]]]),  # a short top entry
        tokens_with(logprobs=[{"token_id": 1}]),  # a struct is a list, not a map
        tokens_with(tool_calls=[[True, None, None, ""]]),  # a bool is no call index
        tokens_with(tool_calls=[[0, 7, None, ""]]),  # an id is text or None
        frame(
            {
                "t": "finished",
                "v": PROTOCOL_VERSION,
                "request_id": "r",
                "index": 0,
                "finish_reason": "exploded",
                "prompt_tokens": 1,
                "completion_tokens": 1,
                "cached_tokens": 0,
            }
        ),  # not a FinishReason
        frame(
            {
                "t": "rejected",
                "v": PROTOCOL_VERSION,
                "request_id": "r",
                "code": "sulking",
                "message": "no",
            }
        ),  # not a RejectCode
        frame(
            {
                "t": "heartbeat",
                "v": PROTOCOL_VERSION,
                "worker_id": "w",
                "incarnation": "i",
                "waiting": 0,
                "running": 0,
                "kv_pages_free": 1,
                "kv_pages_total": 1,
                "prefix_cache_hit_tokens": 0,
                "stats": {"total_tasks": 1},
            }
        ),  # stats are a list
        frame(
            {
                "t": "finished",
                "v": PROTOCOL_VERSION,
                "request_id": "r",
                "index": 0,
                "finish_reason": "stop",
                "prompt_tokens": 1,
                "completion_tokens": 0,
                "cached_tokens": 0,
                "embedding": [0.5, -1.0],
            }
        ),  # a vector is bytes
    ],
)
def test_malformed_structs_and_enums_are_wire_errors(raw: bytes):
    with pytest.raises(WireError) as info:
        decode(raw)
    assert info.value.reason == "malformed"


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


JSONISH = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(), st.text(max_size=3)
    ),
    lambda inner: st.lists(inner, max_size=5),
    max_leaves=10,
)


@settings(max_examples=100, deadline=None)
@given(logprobs=JSONISH, tool_calls=JSONISH)
def test_random_nested_values_never_raise_anything_but_wire_error(logprobs, tool_calls):
    with contextlib.suppress(WireError):
        decode(tokens_with(logprobs=logprobs, tool_calls=tool_calls))


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
