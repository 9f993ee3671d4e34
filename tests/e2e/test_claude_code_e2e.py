"""Claude Code against `astrai serve` (default model, 32k context by linear RoPE scaling,
its built-in `claude-*` names mapped onto it): the real binary's one- and two-turn sessions,
and a session forced to call a tool whose result comes back.

Every session runs in one home folder with the same default model and asks the same thing
first, so their prompts share the ~12.6k-token prefix (system prompt, tools, and the first
user turn, where Claude Code puts ~2.5k tokens of its environment after the user's own words)
and only the first is prefilled cold: on a busy 2-core CPU that takes minutes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.agents import CLAUDE_MAX_OUTPUT_TOKENS, require_agent, run_claude
from tests.e2e.forcing_proxy import ForcingProxy
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow  # real processes (`astrai serve`, claude)

MODEL = "SmolLM2-135M-Instruct"
CONTEXT = 32768
CLAUDE_TIMEOUT_S = 900.0  # a cold ~12.6k-token prefill on a busy 2-core CPU: minutes
# Every session's first words: a prompt that asks for a tool suits the forced call as well as
# the plain sessions, whose answers are text either way.
PROMPT = "Read the file notes.txt"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("claude-home")


@pytest.fixture(scope="module")
def claude_binary() -> Path:
    return require_agent("claude")  # before the server: a skip starts nothing


@pytest.fixture(scope="module")
def kv_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("claude-kv")


def start_server(kv_folder: Path) -> Server:
    args = ("--max-model-len", str(CONTEXT), "--rope-scaling", "linear")
    names = ("--served-model-name", MODEL, "claude-*")
    return Server("serve", *args, *names, "--kv-disk-dir", str(kv_folder))


@pytest.fixture(scope="module")
def agent_server(claude_binary: Path, kv_folder: Path) -> Iterator[Server]:
    server = start_server(kv_folder)
    try:
        yield server.wait_ready()
    finally:
        server.stop()
        assert not server.group_alive()


def assert_success(result: dict[str, Any]) -> None:
    """Claude Code's own verdict on the session: a completed turn, no error from the server.
    One outcome besides a clean end counts: the model's last answer reaching the tests' own
    cap (CLAUDE_MAX_OUTPUT_TOKENS, far under what Claude Code asks), which Claude Code reports
    as an error ("max_output_tokens") once the server stops there and says so. Whether this
    small model's answer ends within the cap turns on Claude Code's prompt, which names the
    session's folder and date: it differs from run to run."""
    assert result["api_error_status"] is None, result
    if result.get("api_error") == "max_output_tokens":
        assert f"{CLAUDE_MAX_OUTPUT_TOKENS} output token maximum" in result["result"], result
        assert result["num_turns"] >= 1, result
        return
    assert result["is_error"] is False, result
    assert result["subtype"] == "success", result
    assert result["terminal_reason"] == "completed", result


def claude(server: Server | ForcingProxy, home: Path, *args: str) -> dict[str, Any]:
    binary = require_agent("claude")
    return run_claude(binary, server.url, home, *args, timeout_s=CLAUDE_TIMEOUT_S)


def test_claude_one_turn_session(agent_server: Server, home: Path):
    result = claude(agent_server, home, "-p", PROMPT)
    assert_success(result)
    # Its default model is a claude-* name, which the server maps onto the served model.
    (model,) = result["modelUsage"]
    assert model.startswith("claude-")
    usage = result["usage"]
    prompt = sum(usage[f"{part}input_tokens"] for part in ("", "cache_creation_", "cache_read_"))
    assert prompt > 8192  # past the trained context


def test_claude_two_turn_session(agent_server: Server, home: Path):
    first = claude(agent_server, home, "-p", PROMPT)
    assert_success(first)
    session = first["session_id"]
    second = claude(agent_server, home, "-p", "And again", "--resume", session)
    assert_success(second)
    assert second["session_id"] == session
    # The second turn's prompt starts as the first's did: its prefix came from the cache.
    assert second["usage"]["cache_read_input_tokens"] > 8192


def test_claude_runs_a_forced_tool_call_and_sends_its_result_back(agent_server: Server, home: Path):
    # Claude Code never sends tool_choice: a proxy in front of the server forces a call to its
    # Read tool (grammar-constrained to Read's schema) on the first request, and a text answer
    # once the result is back.
    with ForcingProxy(agent_server.url, "Read") as proxy:
        result = claude(proxy, home, "-p", PROMPT)
    assert_success(result)
    answered = next(b for b in proxy.bodies if b.get("tool_choice") == {"type": "none"})
    before = proxy.bodies[: proxy.bodies.index(answered)]
    assert any(b.get("tool_choice") == {"type": "tool", "name": "Read"} for b in before)
    *_, call_turn, result_turn = answered["messages"]
    [call] = [block for block in call_turn["content"] if block["type"] == "tool_use"]
    assert call["name"] == "Read" and isinstance(call["input"].get("file_path"), str)
    [returned] = [block for block in result_turn["content"] if block["type"] == "tool_result"]
    assert returned["tool_use_id"] == call["id"]  # Claude Code ran it and sent its result


def test_claude_after_a_restart_reads_the_prompt_back_from_disk(
    agent_server: Server, home: Path, kv_folder: Path
):
    """A new `astrai serve` on the same KV folder (the first one idle beside it: none of its
    memory is the new one's): Claude Code's first request reads the ~12.6k-token prefix
    back from the disk tier instead of prefilling it (its time: docs/BENCHMARKS.md)."""
    assert_success(claude(agent_server, home, "-p", PROMPT))  # the prefix on disk
    restarted = start_server(kv_folder)
    try:
        result = claude(restarted.wait_ready(), home, "-p", PROMPT)
        assert_success(result)
        assert result["usage"]["cache_read_input_tokens"] > 8192
        [worker] = restarted.stats()["workers"]
        assert worker["prefix_cache_disk_hit_tokens"] > 8192
    finally:
        restarted.stop()
        assert not restarted.group_alive()
