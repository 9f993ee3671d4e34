"""/v1/responses through the real gateway app and a scripted worker: Codex's own requests,
streamed and not, the ignored-tools header, the store's routes, and nothing left open."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from common.schemas import Accepted, Finished, Message, Submit, Tokens
from common.token_output import FinishReason, ToolCallDelta
from gateway.config import GatewayConfig
from tests.gateway.in_process import in_process

CODEX = json.loads((Path(__file__).parent / "fixtures" / "codex_requests.json").read_text())
CALL = [ToolCallDelta(0, "abc", "exec_command", ""), ToolCallDelta(0, None, None, '{"cmd":"ls"}')]


def calls_a_tool(submit: Submit) -> list[Message]:
    """Accepted, a word, then one call to exec_command: 3 tokens, 3 of 7 prompt cached."""
    rid = submit.request_id
    return [
        Accepted(rid, prompt_tokens=7),
        Tokens(rid, 0, "Sure.", [11]),
        Tokens(rid, 0, "", [12, 13], tool_calls=CALL),
        Finished(
            rid, 0, FinishReason.TOOL_CALLS, prompt_tokens=7, completion_tokens=3, cached_tokens=3
        ),
    ]


def named_events(text: str) -> list[dict[str, Any]]:
    """A Responses stream's events; each `event:` line names its payload's type."""
    payloads = []
    for block in text.strip().split("\n\n"):
        head, data = block.split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert head == f"event: {payload['type']}"
        payloads.append(payload)
    return payloads


def codex(name: str, **extra: Any) -> dict[str, Any]:
    return {**CODEX[name], "tools": CODEX["tools"], "model": "scripted", **extra}


async def test_codexs_first_turn_streams_and_folds_to_the_same_response():
    async with in_process(calls_a_tool) as run:
        streamed = await run.client.post("/v1/responses", json=codex("first_turn"))
        assert streamed.status_code == 200
        assert streamed.headers["content-type"].startswith("text/event-stream")
        assert streamed.headers["x-astrai-ignored-tools"] == "namespace, web_search"
        payloads = named_events(streamed.text)
        assert payloads[-1]["type"] == "response.completed"
        plain = await run.client.post("/v1/responses", json=codex("first_turn", stream=False))
        assert plain.headers["x-astrai-ignored-tools"] == "namespace, web_search"
        body = plain.json()
        final = payloads[-1]["response"]
        for key in ("id", "created_at"):  # two requests: their own ids and times
            body.pop(key), final.pop(key)
        strip = lambda items: [{k: v for k, v in i.items() if k != "id"} for i in items]  # noqa: E731
        body["output"], final["output"] = strip(body["output"]), strip(final["output"])
        assert body == final
        assert [item["type"] for item in body["output"]] == ["message", "function_call"]
        submit = run.worker.submits[0]
        assert [m["role"] for m in submit.messages] == ["system", "system", "user", "user"]
        assert [t["name"] for t in submit.params.to_wire()["tools"]][:2] == [
            "exec_command",
            "write_stdin",
        ]
        assert submit.params.to_wire()["tool_choice"] == "auto"
        assert run.counted("responses", 200) == 2
        await run.assert_all_released()


async def test_a_stored_response_is_read_continued_and_deleted():
    async with in_process(calls_a_tool) as run:
        first = await run.client.post("/v1/responses", json={"input": "List files.", "store": True})
        response_id = first.json()["id"]
        read = await run.client.get(f"/v1/responses/{response_id}")
        assert (read.status_code, read.json()) == (200, first.json())
        follow = {
            "previous_response_id": response_id,
            "input": [{"type": "function_call_output", "call_id": "call_abc", "output": "a.txt"}],
        }
        assert (await run.client.post("/v1/responses", json=follow)).status_code == 200
        assert run.worker.submits[-1].messages == [
            {"role": "user", "content": "List files."},
            {
                "role": "assistant",
                "content": "Sure.",
                "tool_calls": [
                    {"id": "call_abc", "name": "exec_command", "arguments": '{"cmd":"ls"}'}
                ],
            },
            {"role": "tool", "content": "a.txt", "tool_call_id": "call_abc"},
        ]
        deleted = await run.client.delete(f"/v1/responses/{response_id}")
        assert deleted.json() == {"id": response_id, "object": "response", "deleted": True}
        gone = await run.client.get(f"/v1/responses/{response_id}")
        assert gone.status_code == 404
        assert gone.json()["error"]["message"] == f"Response with id {response_id!r} not found."
        assert (await run.client.delete(f"/v1/responses/{response_id}")).status_code == 404
        again = await run.client.post("/v1/responses", json=follow)
        assert again.status_code == 400
        assert again.json()["error"]["code"] == "previous_response_not_found"
        await run.assert_all_released()


async def test_store_false_is_not_kept():
    async with in_process(calls_a_tool) as run:
        answer = await run.client.post("/v1/responses", json={"input": "hi", "store": False})
        assert answer.json()["store"] is False
        assert (await run.client.get(f"/v1/responses/{answer.json()['id']}")).status_code == 404


async def test_a_bad_body_is_a_400_in_openais_shape():
    async with in_process(calls_a_tool) as run:
        answer = await run.client.post("/v1/responses", json={"input": [{"role": "user"}]})
        assert answer.status_code == 400
        assert answer.json() == {
            "error": {
                "message": "input.0.content is required in a message item",
                "type": "invalid_request_error",
                "param": "input.0.content",
                "code": None,
            }
        }
        assert run.worker.submits == []


async def test_default_max_tokens_is_the_budget_of_requests_without_one():
    async with in_process(calls_a_tool, default_max_tokens=32) as run:
        bodies = [
            ("/v1/responses", {"input": "hi"}),
            ("/v1/responses", {"input": "hi", "max_output_tokens": 5}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
            (
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": "hi"}], "min_tokens": 40},
            ),
        ]
        for path, body in bodies:
            assert (await run.client.post(path, json=body)).status_code == 200
        budgets = [submit.params.to_wire().get("max_tokens") for submit in run.worker.submits]
        assert budgets == [32, 5, 32, 40]


@pytest.mark.parametrize("policy", ["clamp", "error"])
async def test_a_budget_is_cut_to_the_context_unless_the_policy_is_error(policy: str):
    """qwen-code sends max_tokens 32000 beside a long prompt: under clamp (the default) the
    worker cuts it to what the context leaves; under error the worker refuses it (400)."""
    async with in_process(calls_a_tool, max_tokens_past_context=policy) as run:
        chat = {"messages": [{"role": "user", "content": "hi"}]}
        for body in ({**chat, "max_tokens": 32000}, chat):
            assert (await run.client.post("/v1/chat/completions", json=body)).status_code == 200
        budgeted, unbounded = (submit.params.to_wire() for submit in run.worker.submits)
        assert budgeted.get("clamp_max_tokens", False) is (policy == "clamp")
        assert "clamp_max_tokens" not in unbounded  # no budget: nothing to cut


def test_an_unknown_budget_policy_is_refused():
    with pytest.raises(ValueError, match="max_tokens_past_context"):
        GatewayConfig(max_tokens_past_context="truncate")


async def test_without_default_max_tokens_no_budget_is_sent():
    async with in_process(calls_a_tool) as run:
        assert (await run.client.post("/v1/responses", json={"input": "hi"})).status_code == 200
        assert "max_tokens" not in run.worker.submits[0].params.to_wire()


INPUT = [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "input_text", "text": "List files."}]},
    {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "ls"}]},
    {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
]


async def test_input_items_list_a_stored_responses_input_newest_first_a_page_at_a_time():
    from tests.gateway.test_reasoning_protocols import openai_client

    async with in_process(calls_a_tool) as run:
        first = await run.client.post("/v1/responses", json={"input": INPUT})
        rid = first.json()["id"]
        suffix = rid.removeprefix("resp_")
        page = (await run.client.get(f"/v1/responses/{rid}/input_items?limit=2")).json()
        assert page == {
            "object": "list",
            "data": [
                {
                    "id": f"fco_{suffix}_in4",
                    "type": "function_call_output",
                    "call_id": "call_1",
                    "output": "a.txt",
                    "status": "completed",
                },
                {
                    "id": f"fc_{suffix}_in3",
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "exec_command",
                    "arguments": "{}",
                    "status": "completed",
                },
            ],
            "first_id": f"fco_{suffix}_in4",
            "last_id": f"fc_{suffix}_in3",
            "has_more": True,
        }
        # The SDK follows the pages (after = the last id) and reads every item type.
        items = [item async for item in openai_client(run).responses.input_items.list(rid, limit=2)]
        assert [item.type for item in items] == [
            "function_call_output",
            "function_call",
            "reasoning",
            "message",
            "message",
        ]
        assert (items[3].role, items[3].content[0].text) == ("user", "List files.")
        assert items[2].content[0].text == "ls"
        oldest = await run.client.get(f"/v1/responses/{rid}/input_items?order=asc&limit=1")
        assert [item["id"] for item in oldest.json()["data"]] == [f"msg_{suffix}_in0"]
        after = f"/v1/responses/{rid}/input_items?order=asc&after=msg_{suffix}_in0&limit=100"
        assert len((await run.client.get(after)).json()["data"]) == 4


@pytest.mark.parametrize(
    ("query", "status", "param"),
    [
        ("limit=0", 400, "limit"),
        ("limit=101", 400, "limit"),
        ("limit=two", 400, "limit"),
        ("order=sideways", 400, "order"),
        ("after=msg_nope", 400, "after"),
    ],
)
async def test_bad_input_items_queries_are_400s_naming_them(query: str, status: int, param: str):
    async with in_process(calls_a_tool) as run:
        rid = (await run.client.post("/v1/responses", json={"input": "hi"})).json()["id"]
        reply = await run.client.get(f"/v1/responses/{rid}/input_items?{query}")
        assert (reply.status_code, reply.json()["error"]["param"]) == (status, param)
        missing = await run.client.get("/v1/responses/resp_nope/input_items")
        assert missing.status_code == 404
