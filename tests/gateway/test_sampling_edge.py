"""The HTTP edge checks each setting once, by its protocol's body model; the gateway then
builds SamplingParams from those values without checking them again (`of_checked`). So every
body's rules must be the engine's or narrower: whatever a body accepts, the worker's side of
the wire (`from_wire`, the engine's rules) accepts as the very same struct."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import RequestError
from common.sampling_params import SamplingParams
from gateway.errors import GatewayError
from gateway.protocols.anthropic import AnthropicResponseBuilder
from gateway.protocols.base import ResponseBuilder
from gateway.protocols.completions import CompletionsResponseBuilder
from gateway.protocols.openai import OpenAIResponseBuilder
from gateway.protocols.responses import ResponsesResponseBuilder
from gateway.response_store import ResponseStore

HELLO = [{"role": "user", "content": "hi"}]
# Values at and past the edges of every setting's range, of every JSON type.
EDGE_VALUES = [
    *(True, False, "", "a", "\n", [], ["a"], ["a", "b"], [0], [1, 2], [-1]),
    *(-(2**63) - 1, -(2**63), -2, -1, 0, 1, 2, 4, 5, 16, 17, 20, 21, 100, 101),
    *(2**31 - 1, 2**31, 2**63 - 1, 2**63),
    *(-0.1, 0.0, 0.05, 0.5, 1.0, 1.5, 2.0, 2.5, 100.5, float("nan"), float("inf")),
    *({"5": 1}, {"5": 101}, {"enable_thinking": False}, {"tools": 1}),
]
VALUE = (
    st.sampled_from(EDGE_VALUES)
    | st.integers()
    | st.floats()
    | st.lists(st.text(max_size=3), max_size=17)
)
OPENAI = [
    *("temperature", "top_p", "top_k", "min_p", "n", "seed", "min_tokens", "max_tokens"),
    *("presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos", "stop"),
    *("stop_token_ids", "logit_bias", "prompt_logprobs", "logprobs"),
]
PROTOCOLS: dict[str, tuple[ResponseBuilder, dict[str, Any], list[str]]] = {
    "chat": (
        OpenAIResponseBuilder(),
        {"messages": HELLO},
        [*OPENAI, "max_completion_tokens", "top_logprobs", "chat_template_kwargs"],
    ),
    "completions": (CompletionsResponseBuilder(), {"prompt": "hi"}, [*OPENAI, "echo"]),
    "messages": (
        AnthropicResponseBuilder(),
        {"model": "m", "messages": HELLO, "max_tokens": 1},
        ["max_tokens", "temperature", "top_p", "top_k", "stop_sequences"],
    ),
    "responses": (
        ResponsesResponseBuilder(ResponseStore(16, 1 << 20)),
        {"input": "hi", "include": ["message.output_text.logprobs"]},
        ["max_output_tokens", "temperature", "top_p", "top_logprobs", "truncation"],
    ),
}


def check_crossing(protocol: str, fields: dict[str, Any]) -> bool:
    """Whether the body was accepted; if so, the worker's side took it unchanged."""
    builder, required, _ = PROTOCOLS[protocol]
    try:
        params = builder.parse({**required, **fields}).params
    except GatewayError:
        return False  # refused at the edge: the worker never sees it
    try:
        received = SamplingParams.from_wire(params.to_wire())
    except RequestError as exc:
        pytest.fail(f"{protocol} accepted {fields}, the engine's rules refuse it: {exc}")
    assert received == params
    assert received.model_fields_set == params.model_fields_set
    return True


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_each_setting_at_each_edge_crosses_as_it_was_accepted(protocol: str) -> None:
    _, _, names = PROTOCOLS[protocol]
    accepted = [check_crossing(protocol, {name: value}) for name in names for value in EDGE_VALUES]
    assert 0 < sum(accepted) < len(accepted)


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_settings_together_cross_as_they_were_accepted(protocol: str, data: st.DataObject) -> None:
    names = PROTOCOLS[protocol][2]
    check_crossing(protocol, data.draw(st.dictionaries(st.sampled_from(names), VALUE, max_size=4)))


def test_every_setting_the_chat_route_takes_crosses_unchanged() -> None:
    body = {
        "messages": HELLO,
        **{"temperature": 2, "top_p": 1, "top_k": -1, "min_p": 1, "n": 16, "seed": -(2**63)},
        **{"presence_penalty": -2, "frequency_penalty": 2, "repetition_penalty": 0.01},
        **{"min_tokens": 3, "max_completion_tokens": 3, "stop": "x", "stop_token_ids": [0]},
        **{"logit_bias": {"2147483647": -100}, "logprobs": True, "top_logprobs": 20},
        **{"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}},
    }
    params = OpenAIResponseBuilder().parse(body).params
    assert params == SamplingParams.from_wire(params.to_wire())
    assert (params.top_k, params.stop, params.logit_bias) == (0, ("x",), ((2**31 - 1, -100.0),))
    assert type(params.temperature) is float and params.stop_token_ids == (0,)


def test_a_rule_across_fields_is_still_a_400_naming_the_field() -> None:
    with pytest.raises(GatewayError) as caught:
        OpenAIResponseBuilder().parse({"messages": HELLO, "min_tokens": 5, "max_tokens": 4})
    assert caught.value.param == "min_tokens"
    assert caught.value.message == "min_tokens must be <= max_tokens (4), got 5"
