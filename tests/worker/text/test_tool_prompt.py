"""Tools and tool turns in the prompt: generic role/content messages and chat-template shapes."""

import json
from typing import Any

from common.tool_calls import CALL_CLOSE, CALL_OPEN
from worker.text.tool_prompt import (
    TOOLS_INSTRUCTION,
    generic_messages,
    template_messages,
    template_tools,
)

WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "strict": True,
}
TIME = {"name": "get_time"}  # no description, no parameters
EMPTY_PARAMETERS = {"type": "object", "properties": {}}

CALL = {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "call_1"},
]


def instruction_for(*tools: dict[str, Any]) -> str:
    signatures = "\n".join(json.dumps(signature) for signature in map(signature_of, tools))
    return TOOLS_INSTRUCTION.replace("{tools}", signatures)


def signature_of(tool: dict[str, Any]) -> dict[str, Any]:
    signature = {"name": tool["name"]}
    if "description" in tool:
        signature["description"] = tool["description"]
    signature["parameters"] = tool.get("parameters", EMPTY_PARAMETERS)
    return signature


def signatures_in(system: str) -> list[dict[str, Any]]:
    """The JSON signatures between <tools> and </tools> of a system message."""
    inner = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    return [json.loads(line) for line in inner.split("\n")]


def test_the_instruction_tells_the_call_format_and_has_a_place_for_the_tools() -> None:
    assert "{tools}" in TOOLS_INSTRUCTION
    assert f'{CALL_OPEN}{{"name": <function name>' in TOOLS_INSTRUCTION
    assert CALL_CLOSE in TOOLS_INSTRUCTION


def test_tools_add_a_system_message_with_the_instruction_and_each_signature() -> None:
    messages = [{"role": "user", "content": "Hi"}]
    out = generic_messages(messages, [WEATHER, TIME])
    assert [message["role"] for message in out] == ["system", "user"]
    assert out[0]["content"] == instruction_for(WEATHER, TIME)
    assert signatures_in(out[0]["content"]) == [
        {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": WEATHER["parameters"],
        },
        {"name": "get_time", "parameters": EMPTY_PARAMETERS},
    ]
    assert "{tools}" not in out[0]["content"]
    assert out[1] == {"role": "user", "content": "Hi"}


def test_an_existing_system_message_gets_the_instruction_appended() -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
    ]
    out = generic_messages(messages, [WEATHER])
    assert [message["role"] for message in out] == ["system", "user"]
    assert out[0]["content"] == "You are terse.\n\n" + instruction_for(WEATHER)
    assert messages[0]["content"] == "You are terse.", "the caller's messages are not changed"


def test_a_system_message_not_first_is_not_where_the_instruction_goes() -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": "Late."},
    ]
    out = generic_messages(messages, [TIME])
    assert [message["role"] for message in out] == ["system", "user", "system"]
    assert out[0]["content"] == instruction_for(TIME)
    assert out[2] == {"role": "system", "content": "Late."}


def test_an_assistant_call_is_written_as_a_tool_call_line() -> None:
    out = generic_messages(CONVERSATION, [WEATHER])
    assistant = out[2]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    )


def test_assistant_text_comes_before_its_calls_one_line_each() -> None:
    second = {"id": "call_2", "name": "get_time", "arguments": '{"zone": "UTC", "n": [1, {}]}'}
    messages = [{"role": "assistant", "content": "Let me check.", "tool_calls": [CALL, second]}]
    (assistant,) = generic_messages(messages, [])
    lines = assistant["content"].split("\n")
    assert lines[0] == "Let me check."
    assert len(lines) == 3
    calls = [
        json.loads(line.removeprefix(CALL_OPEN).removesuffix(CALL_CLOSE)) for line in lines[1:]
    ]
    assert calls == [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_time", "arguments": {"zone": "UTC", "n": [1, {}]}},
    ]
    assert all(line.startswith(CALL_OPEN) and line.endswith(CALL_CLOSE) for line in lines[1:])


def test_an_assistant_call_with_no_content_has_only_the_call() -> None:
    messages = [{"role": "assistant", "content": None, "tool_calls": [CALL]}]
    (assistant,) = generic_messages(messages, [])
    assert assistant["content"].startswith(CALL_OPEN)
    assert assistant["content"].endswith(CALL_CLOSE)


def test_arguments_given_as_an_object_or_missing_are_written_as_objects() -> None:
    calls = [
        {"id": "a", "name": "get_weather", "arguments": {"city": "Rome"}},
        {"id": "b", "name": "get_time"},
    ]
    (assistant,) = generic_messages([{"role": "assistant", "content": "", "tool_calls": calls}], [])
    assert assistant["content"] == (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )


def test_tool_turns_keep_their_role_and_content() -> None:
    out = generic_messages(CONVERSATION, [WEATHER])
    assert out[3] == {"role": "tool", "content": '{"temp": 21}'}


def test_without_tools_or_tool_turns_messages_are_plain_role_and_content() -> None:
    messages = [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi", "name": "ada"},
        {"role": "assistant", "content": "Hello!"},
    ]
    assert generic_messages(messages, []) == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
    ]


def test_template_messages_give_transformers_style_calls_and_keep_tool_call_ids() -> None:
    assert template_messages(CONVERSATION) == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "call_1"},
    ]


def test_template_messages_keep_arguments_that_are_not_json_as_text() -> None:
    call = {"id": "x", "name": "get_weather", "arguments": "not json"}
    (assistant,) = template_messages([{"role": "assistant", "content": "", "tool_calls": [call]}])
    assert assistant["tool_calls"][0]["function"]["arguments"] == "not json"


def test_template_messages_without_calls_are_role_and_content() -> None:
    messages = [{"role": "user", "content": "Hi", "name": "ada"}]
    assert template_messages(messages) == [{"role": "user", "content": "Hi"}]


def test_template_tools_wrap_each_signature_as_a_function() -> None:
    assert template_tools([WEATHER, TIME]) == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather in a city.",
                "parameters": WEATHER["parameters"],
            },
        },
        {"type": "function", "function": {"name": "get_time", "parameters": EMPTY_PARAMETERS}},
    ]
