"""Tool calling through `astrai serve` on the default model, with both official SDKs."""

from __future__ import annotations

import anthropic
import openai
import pydantic
import pytest

from tests.e2e.harness import Server
from tests.e2e.sdk import MODEL, anthropic_client, ask, openai_client

pytestmark = pytest.mark.slow
PROMPTS = [
    "What is the weather in Paris?",
    "Should I take an umbrella in Tokyo today?",
    "Tell me a joke.",
]


class GetWeather(pydantic.BaseModel):
    """The current weather in a city."""

    city: str
    unit: str


ANTHROPIC_TOOL = {
    "name": "GetWeather",
    "description": "The current weather in a city.",
    "input_schema": GetWeather.model_json_schema(),
}
NAMED = {"type": "function", "function": {"name": "GetWeather"}}


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("tool_choice", ["required", NAMED])
def test_openai_required_and_named_calls_parse_against_the_schema(
    default_server: Server, prompt: str, tool_choice: object
):
    completion = openai_client(default_server).chat.completions.parse(
        model=MODEL,
        messages=ask(prompt),
        tools=[openai.pydantic_function_tool(GetWeather)],
        tool_choice=tool_choice,
        max_tokens=80,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert call.id.startswith("call_") and call.function.name == "GetWeather"
        assert isinstance(call.function.parsed_arguments, GetWeather)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_openai_streamed_calls_assemble_in_the_sdk_helper(default_server: Server, prompt: str):
    with openai_client(default_server).chat.completions.stream(
        model=MODEL,
        messages=ask(prompt),
        tools=[openai.pydantic_function_tool(GetWeather)],
        tool_choice=NAMED,
        max_tokens=80,
        temperature=0.7,
        seed=3,
    ) as stream:
        for _ in stream:
            pass
        completion = stream.get_final_completion()
    calls = completion.choices[0].message.tool_calls
    assert completion.choices[0].finish_reason == "tool_calls" and calls
    assert all(isinstance(call.function.parsed_arguments, GetWeather) for call in calls)


def test_openai_tool_result_follow_up_is_answered(default_server: Server):
    client = openai_client(default_server)
    tools = [openai.pydantic_function_tool(GetWeather)]
    first = client.chat.completions.create(
        model=MODEL, messages=ask(PROMPTS[0]), tools=tools, tool_choice="required", max_tokens=80
    )
    call = first.choices[0].message.tool_calls[0]
    history = [
        *ask(PROMPTS[0]),
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"},
    ]
    reply = client.chat.completions.create(
        model=MODEL, messages=history, tools=tools, tool_choice="none", max_tokens=30
    )
    assert reply.choices[0].message.content and not reply.choices[0].message.tool_calls


def test_openai_auto_answers_in_text_or_in_valid_calls(default_server: Server):
    for prompt in PROMPTS:
        reply = openai_client(default_server).chat.completions.parse(
            model=MODEL,
            messages=ask(prompt),
            tools=[openai.pydantic_function_tool(GetWeather)],
            max_tokens=80,
            temperature=0,
        )
        message = reply.choices[0].message
        if reply.choices[0].finish_reason == "tool_calls":
            assert all(
                isinstance(c.function.parsed_arguments, GetWeather) for c in message.tool_calls
            )
        else:
            assert message.tool_calls is None and message.content is not None


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("tool_choice", [{"type": "any"}, {"type": "tool", "name": "GetWeather"}])
def test_anthropic_forced_tool_use_validates(default_server: Server, prompt: str, tool_choice):
    message = anthropic_client(default_server).messages.create(
        model=MODEL,
        max_tokens=80,
        messages=ask(prompt),
        tools=[ANTHROPIC_TOOL],
        tool_choice=tool_choice,
    )
    assert message.stop_reason == "tool_use"
    uses = [block for block in message.content if block.type == "tool_use"]
    assert uses and all(block.id.startswith("toolu_") for block in uses)
    for block in uses:
        GetWeather.model_validate(block.input)


def test_anthropic_streamed_tool_use_and_the_result_turn(default_server: Server):
    client = anthropic_client(default_server)
    with client.messages.stream(
        model=MODEL,
        max_tokens=80,
        messages=ask(PROMPTS[1]),
        tools=[ANTHROPIC_TOOL],
        tool_choice={"type": "any"},
    ) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    use = next(block for block in message.content if block.type == "tool_use")
    GetWeather.model_validate(use.input)
    history = [
        *ask(PROMPTS[1]),
        {"role": "assistant", "content": [use.model_dump(include={"type", "id", "name", "input"})]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Rain all day"}],
        },
    ]
    reply = client.messages.create(
        model=MODEL,
        max_tokens=30,
        messages=history,
        tools=[ANTHROPIC_TOOL],
        tool_choice={"type": "none"},
    )
    assert reply.stop_reason in ("end_turn", "max_tokens")
    assert reply.content[0].type == "text" and reply.content[0].text


def test_a_tool_schema_that_cannot_compile_is_a_400_in_each_protocol(default_server: Server):
    bad = {"type": "nonsense"}
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client(default_server).chat.completions.create(
            model=MODEL,
            messages=ask("hi"),
            tools=[{"type": "function", "function": {"name": "f", "parameters": bad}}],
        )
    assert caught.value.body["param"] == "tools.0.function.parameters"
    with pytest.raises(anthropic.BadRequestError) as raised:
        anthropic_client(default_server).messages.create(
            model=MODEL,
            max_tokens=8,
            messages=ask("hi"),
            tools=[{"name": "f", "input_schema": bad}],
        )
    assert "nonsense" in raised.value.message
    assert default_server.stats()["open_requests"] == 0
