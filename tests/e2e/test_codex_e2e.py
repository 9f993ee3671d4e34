"""The real Codex CLI against `astrai serve` on the default model with a 32k context: a
one-turn session and a two-turn one (resumed) complete, with no API error, and a call the
model is forced to make (tool_choice and its arguments' grammar) runs and comes back."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.codex_cli import Codex, require_codex
from tests.e2e.forcing_proxy import ForcingProxy
from tests.e2e.harness import Server
from tests.e2e.sdk import MODEL

pytestmark = pytest.mark.slow  # real processes, the real model, a ~6,400-token prompt

# Codex never sends max_output_tokens: --default-max-tokens keeps each answer (and so the
# test) short on a CPU; an answer it cuts still completes (Codex fails a turn on
# response.incomplete). Its first request is ~6,400 tokens with the instructions it sends.
SERVE_ARGS = (
    "--max-model-len",
    "32768",
    "--rope-scaling",
    "linear",
    "--default-max-tokens",
    "32",
    "--kv-cache-mb",
    "1024",
)
TURN_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def codex_server() -> Iterator[Server]:
    require_codex()
    server = Server("serve", *SERVE_ARGS)
    try:
        yield server.wait_ready()
    finally:
        server.stop()
        assert not server.group_alive()


@pytest.fixture
def codex(codex_server: Server, tmp_path: Path) -> Codex:
    return Codex(require_codex(), tmp_path / "home", tmp_path / "work", codex_server.url, MODEL)


def test_one_turn_and_a_resumed_second_turn_complete(codex: Codex, codex_server: Server):
    first = codex.run("Say hello.", timeout_s=TURN_TIMEOUT_S)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.errors() == []
    assert first.kinds()[0] == "thread.started" and first.kinds()[-1] == "turn.completed"
    second = codex.run("resume", "--last", "Now say goodbye.", timeout_s=TURN_TIMEOUT_S)
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.errors() == []
    assert second.kinds()[-1] == "turn.completed"
    assert second.events[0] == first.events[0]  # the same thread, continued
    metrics = codex_server_metrics(codex_server)
    assert metrics.get(("responses", "200"), 0) >= 2
    assert [key for key in metrics if key[0] == "responses" and key[1] != "200"] == []


def test_a_forced_call_runs_and_its_output_comes_back(codex_server: Server, tmp_path: Path):
    # Codex never sends tool_choice: a proxy forces exec_command on the first request, its
    # `cmd` narrowed by the grammar to one harmless command, and a text answer once the
    # command's output is back in the input.
    mark = "astrai-forced-call"
    with ForcingProxy(codex_server.url, "exec_command", arguments={"cmd": f"echo {mark}"}) as proxy:
        codex = Codex(require_codex(), tmp_path / "home", tmp_path / "work", proxy.url, MODEL)
        run = codex.run("Run the echo command.", timeout_s=TURN_TIMEOUT_S)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.errors() == [] and run.kinds()[-1] == "turn.completed"
    commands = [
        e["item"] for e in run.events if e.get("item", {}).get("type") == "command_execution"
    ]
    assert commands and mark in commands[0]["command"]
    answered = next(b for b in proxy.bodies if b.get("tool_choice") == "none")
    forced = [b for b in proxy.bodies if isinstance(b.get("tool_choice"), dict)]
    assert forced and forced[0]["tool_choice"] == {"type": "function", "name": "exec_command"}
    [call] = [i for i in answered["input"] if i.get("type") == "function_call"]
    [output] = [i for i in answered["input"] if i.get("type") == "function_call_output"]
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {
        "cmd": f"echo {mark}"
    }
    assert output["call_id"] == call["call_id"]  # Codex ran the model's call and sent its output
    assert mark in json.dumps(output["output"])


def codex_server_metrics(server: Server) -> dict[tuple[str, str], float]:
    """astrai_requests_total by (protocol, status), from /metrics."""
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    pattern = re.compile(r'^astrai_requests_total\{protocol="(\w+)",status="(\d+)"\} (\S+)$', re.M)
    return {(p, s): float(v) for p, s, v in pattern.findall(text)}
