"""CompletionsResponseBuilder: prompt forms, every parameter, every 400, exact bodies and SSE."""

from typing import Any

import pytest

from common.sampling_params import SamplingParams
from common.schemas import Submit
from common.token_output import TokenLogprob, TopLogprob
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.base import ChatRequest, ChatResult, ChoiceResult, StreamState
from gateway.protocols.completions import MAX_CHOICES, CompletionsResponseBuilder
from tests.gateway.test_openai_protocol import SHARED_FIELDS, SHARED_PARAMS, data, usage

BUILDER = CompletionsResponseBuilder()
DEFAULT_PARAMS = {"n": 1, "max_tokens": 16}  # the rest are SamplingParams defaults


def parse(**fields: Any) -> ChatRequest:
    return BUILDER.parse({"prompt": "Once upon a time", **fields})


def parse_error(**fields: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse(fields)
    assert caught.value.kind == ErrorKind.INVALID_REQUEST
    return caught.value


def make_state(prompts: list[Any], n: int = 1, include_usage: bool = False) -> StreamState:
    request = BUILDER.parse(
        {
            "prompt": prompts,
            "n": n,
            "stream": True,
            "stream_options": {"include_usage": include_usage},
        }
    )
    return StreamState(
        request_id="cmpl-abc",
        model="smol",
        created=1700000000,
        request=request,
        prompt_tokens=7,
        cached_tokens=4,
        completion_tokens=3,
    )


def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "cmpl-abc",
        "object": "text_completion",
        "created": 1700000000,
        "model": "smol",
        "choices": choices,
        **extra,
    }


def choice(index: int, text: str, logprobs: Any = None, finish: str | None = None) -> dict:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}


# -- parse: what is accepted --------------------------------------------------------------


def test_minimal_request_gets_openais_defaults():
    assert parse() == ChatRequest(
        model=None,
        messages=[],
        params=SamplingParams(**DEFAULT_PARAMS),
        prompts=["Once upon a time"],
    )


def test_every_parameter_lands_on_its_sampling_keyword():
    request = parse(
        **SHARED_FIELDS,
        model="smol",
        max_tokens=64,
        best_of=3,
        user="someone",
        stream=True,
        stream_options={"include_usage": True},
        logprobs=3,
        echo=False,
        suffix=None,
    )
    assert request == ChatRequest(
        model="smol",
        messages=[],
        params=SamplingParams(**SHARED_PARAMS, max_tokens=64, logprobs=True, top_logprobs=3),
        stream=True,
        include_usage=True,
        prompts=["Once upon a time"],
    )


@pytest.mark.parametrize(
    ("prompt", "prompts"),
    [
        ("text", ["text"]),
        (["one", "two"], ["one", "two"]),
        ([1, 2, 3], [[1, 2, 3]]),  # one prompt as token ids
        ([[1, 2], [3]], [[1, 2], [3]]),
        (["text", [4, 5]], ["text", [4, 5]]),
    ],
)
def test_every_prompt_form_becomes_a_list_of_prompts(prompt: Any, prompts: list[Any]):
    assert parse(prompt=prompt).prompts == prompts


def test_logprobs_zero_asks_for_the_chosen_tokens_only():
    assert parse(logprobs=0).params.to_wire() == {
        **DEFAULT_PARAMS,
        "logprobs": True,
        "top_logprobs": 0,
    }


def test_echo_without_logprobs_is_served():
    assert parse(echo=True).echo is True


def test_choices_are_prompts_times_n_and_cross_the_wire_as_raw_prompts():
    request = parse(prompt=["a", [7, 8]], n=3, echo=True)
    assert request.num_choices == 6
    assert request.submit("cmpl-1") == Submit(
        "cmpl-1", request.params, messages=None, prompts=["a", [7, 8]], echo=True
    )
    assert request.routing_text == "a\n7 8"


def test_a_chat_request_still_crosses_as_messages():
    chat = ChatRequest(
        model=None, messages=[{"role": "user", "content": "hi"}], params=SamplingParams(n=2)
    )
    assert chat.num_choices == 2
    assert chat.submit("c-1") == Submit("c-1", SamplingParams(n=2), messages=chat.messages)


# -- parse: what is refused, naming the parameter ------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "param"),
    [
        (None, "prompt"),
        (5, "prompt"),
        ({"text": "x"}, "prompt"),
        ([], "prompt"),
        ("", "prompt"),
        ("\ud800", "prompt"),
        (["ok", ""], "prompt.1"),
        (["ok", "\udfff"], "prompt.1"),
        ([[]], "prompt.0"),
        ([1, -1], "prompt.1"),
        ([1, True], "prompt.1"),
        ([1.5], "prompt.0"),
        (["a", 3], "prompt.1"),
        ([[1, "x"]], "prompt.0.1"),
        ([None], "prompt.0"),
        ([2**31], "prompt.0"),
        ([[1, 2**64]], "prompt.0.1"),
    ],
)
def test_bad_prompts_are_400_naming_the_prompt_by_path(prompt: Any, param: str):
    error = parse_error(prompt=prompt)
    status, body = BUILDER.error_body(error)
    assert (status, body["error"]["param"]) == (400, param)
    assert body["error"]["message"].startswith(param)


def test_a_missing_prompt_is_400():
    error = parse_error()
    assert (error.param, error.message) == ("prompt", "prompt is required")


def test_error_messages_say_which_prompt_is_bad():
    assert parse_error(prompt=["ok", [1, -1]]).message == (
        "prompt.1.1 must be a token id (an integer >= 0), got -1"
    )
    assert parse_error(prompt=["ok", ""]).message == "prompt.1 must not be empty"


def test_suffix_is_refused_not_ignored():
    error = parse_error(prompt="def f(", suffix="    return 1")
    assert (error.param, error.message) == ("suffix", "suffix is not supported by this server")


@pytest.mark.parametrize("logprobs", [6, -1, True, 1.0, "2"])
def test_logprobs_must_be_an_integer_up_to_five(logprobs: Any):
    assert parse_error(prompt="x", logprobs=logprobs).param == "logprobs"


def test_echo_with_logprobs_asks_for_the_prompts_logprobs_too():
    assert parse(prompt="x", echo=True, logprobs=2).params.to_wire()["prompt_logprobs"] == 2
    assert "prompt_logprobs" not in parse(prompt="x", logprobs=2).params.to_wire()
    assert (
        parse(prompt="x", echo=True, logprobs=1, prompt_logprobs=4).params.to_wire()[
            "prompt_logprobs"
        ]
        == 4
    )


@pytest.mark.parametrize("value", [-1, 21, True, "1"])
def test_prompt_logprobs_must_be_a_count_up_to_twenty(value: Any):
    assert parse_error(prompt="x", prompt_logprobs=value).param == "prompt_logprobs"


def test_prompt_logprobs_are_refused_when_streamed():
    error = parse_error(prompt="x", prompt_logprobs=1, stream=True)
    assert error.param == "prompt_logprobs" and "non-streamed" in str(error)


@pytest.mark.parametrize(("best_of", "n"), [(3, 1), (1, 2), (0, 1)])
def test_best_of_other_than_n_is_refused(best_of: int, n: int):
    assert parse_error(prompt="x", best_of=best_of, n=n).param == "best_of"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"min_tokens": 17}, "min_tokens"),  # past the default max_tokens of 16
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"stop_token_ids": [-1]}, "stop_token_ids.0"),
        ({"seed": 2**64}, "seed"),
        ({"max_tokens": 2**64}, "max_tokens"),
        ({"logprobs": 2**64}, "logprobs"),
        ({"best_of": 2**64}, "best_of"),
        ({"top_p": float("nan")}, "top_p"),
        ({"stop": "\ud800"}, "stop"),
        ({"temperature": 3}, "temperature"),
        ({"n": 17}, "n"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"echo": "yes"}, "echo"),
    ],
)
def test_bad_parameters_are_400_naming_them(fields: dict[str, Any], param: str):
    assert parse_error(prompt="x", **fields).param == param


def test_too_many_choices_are_refused():
    prompts = ["x"] * (MAX_CHOICES // 16 + 1)
    assert parse_error(prompt=prompts, n=16).param == "prompt"
    assert parse(prompt=prompts[:-1], n=16).num_choices == MAX_CHOICES


# -- responses ---------------------------------------------------------------------------


def test_non_streamed_body_with_logprobs_and_text_offsets():
    hello = [
        TokenLogprob(10, "Hel", -0.5, (TopLogprob(10, "Hel", -0.5), TopLogprob(11, "He", -1.5))),
        TokenLogprob(20, "lo", -0.25, (TopLogprob(20, "lo", -0.25), TopLogprob(21, "p", -2.0))),
    ]
    result = ChatResult(
        "cmpl-abc",
        "smol",
        1700000000,
        [
            ChoiceResult(1, "Bye", "stop", completion_tokens=1),
            ChoiceResult(0, "Hello", "length", logprobs=hello, completion_tokens=2),
        ],
        prompt_tokens=9,
        cached_tokens=6,
    )
    assert BUILDER.format_response(result) == {
        "id": "cmpl-abc",
        "object": "text_completion",
        "created": 1700000000,
        "model": "smol",
        "choices": [
            choice(
                0,
                "Hello",
                {
                    "tokens": ["Hel", "lo"],
                    "token_logprobs": [-0.5, -0.25],
                    "top_logprobs": [{"Hel": -0.5, "He": -1.5}, {"lo": -0.25, "p": -2.0}],
                    "text_offset": [0, 3],
                },
                "length",
            ),
            choice(1, "Bye", None, "stop"),
        ],
        "usage": usage(9, 3, 6),
    }


def test_exact_sse_sequence_with_usage():
    state = make_state(["a", "b"], include_usage=True)
    events = [
        *BUILDER.stream_start(state),
        *BUILDER.stream_tokens(state, 1, "B", []),
        *BUILDER.stream_tokens(state, 0, "", []),  # nothing new: no chunk
        *BUILDER.stream_tokens(state, 0, "A", []),
        *BUILDER.stream_choice_end(state, ChoiceResult(0, finish_reason="stop")),
        *BUILDER.stream_choice_end(state, ChoiceResult(1, finish_reason="length")),
        *BUILDER.stream_end(state),
    ]
    assert data(events) == [
        chunk([choice(1, "B")], usage=None),
        chunk([choice(0, "A")], usage=None),
        chunk([choice(0, "", None, "stop")], usage=None),
        chunk([choice(1, "", None, "length")], usage=None),
        chunk([], usage=usage(7, 3, 4)),
        "[DONE]",
    ]


def test_streamed_text_offsets_continue_per_choice():
    state = make_state(["a"], n=2)
    first = BUILDER.stream_tokens(state, 0, "Hel", [TokenLogprob(10, "Hel", -0.5)])
    other = BUILDER.stream_tokens(state, 1, "X", [TokenLogprob(30, "X", -1.0)])
    second = BUILDER.stream_tokens(state, 0, "lo", [TokenLogprob(20, "lo", -0.25)])
    offsets = [c["choices"][0]["logprobs"]["text_offset"] for c in data(first + other + second)]
    assert offsets == [[0], [0], [3]]
    assert "usage" not in data(first)[0]  # only with include_usage


def test_stream_error_is_an_openai_error_then_done():
    state = make_state(["a"])
    events = BUILDER.stream_error(state, GatewayError.invalid("bad", "prompt"))
    assert data(events) == [
        {
            "error": {
                "message": "bad",
                "type": "invalid_request_error",
                "param": "prompt",
                "code": None,
            }
        },
        "[DONE]",
    ]


def test_names():
    assert (BUILDER.name, BUILDER.id_prefix) == ("completions", "cmpl-")
