"""The real Codex CLI against a real `astrai gateway` whose worker is scripted to call a tool:
Codex reads the streamed function call, runs the command, and its output comes back in the
next request as a function_call_output; the session then completes. No model: the events are
exactly the scripted ones, so this checks the Responses stream's shapes against the binary."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.schemas import Accepted, Finished, Message, Submit, Tokens
from common.token_output import FinishReason, ToolCallDelta
from tests.e2e.codex_cli import Codex, require_codex
from tests.e2e.harness import Server
from tests.gateway.scripted_worker import ScriptedWorker

pytestmark = pytest.mark.slow  # real processes

MARK = "astrai-tool-round-trip"
COMMAND = json.dumps({"cmd": f"echo {MARK}"})


def calls_then_answers(submit: Submit) -> list[Message]:
    """A call to exec_command first; once its result is in the chat, a plain answer."""
    rid = submit.request_id
    if not any(turn["role"] == "tool" for turn in submit.messages or []):
        call = [ToolCallDelta(0, "1", "exec_command", ""), ToolCallDelta(0, None, None, COMMAND)]
        return [
            Accepted(rid, prompt_tokens=100),
            Tokens(rid, 0, "", [1, 2, 3], tool_calls=call),
            Finished(
                rid,
                0,
                FinishReason.TOOL_CALLS,
                prompt_tokens=100,
                completion_tokens=3,
                cached_tokens=0,
            ),
        ]
    return [
        Accepted(rid, prompt_tokens=120),
        Tokens(rid, 0, "Done.", [4]),
        Finished(
            rid, 0, FinishReason.STOP, prompt_tokens=120, completion_tokens=1, cached_tokens=0
        ),
    ]


@pytest.fixture
def scripted_gateway() -> Iterator[tuple[Server, ScriptedWorker]]:
    require_codex()
    server = Server("gateway").wait_ready(workers=0)
    worker = ScriptedWorker(server.worker_bind, calls_then_answers).start()
    try:
        server.wait_ready(timeout_s=30)
        yield server, worker
    finally:
        worker.stop()
        server.stop()
        assert not server.group_alive()


def test_a_tool_call_round_trips_through_codex(
    scripted_gateway: tuple[Server, ScriptedWorker], tmp_path: Path
):
    server, worker = scripted_gateway
    codex = Codex(require_codex(), tmp_path / "home", tmp_path / "work", server.url, worker.model)
    run = codex.run("Run the echo command.", timeout_s=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.errors() == []
    commands = [
        e["item"] for e in run.events if e.get("item", {}).get("type") == "command_execution"
    ]
    assert commands and MARK in commands[-1]["command"]
    messages = [
        e["item"]["text"] for e in run.events if e.get("item", {}).get("type") == "agent_message"
    ]
    assert messages == ["Done."] and run.kinds()[-1] == "turn.completed"
    assert len(worker.submits) == 2
    first, second = worker.submits
    assert second.messages[: len(first.messages)] == first.messages  # the same chat, continued
    call, result = second.messages[len(first.messages) :]
    assert call["role"] == "assistant"
    assert call["tool_calls"] == [{"id": "call_1", "name": "exec_command", "arguments": COMMAND}]
    assert (result["role"], result["tool_call_id"]) == ("tool", "call_1")
    assert MARK in result["content"]
