"""The real Codex CLI (`make agents` installs it under $AGENTS_DIR) run against a test server.

Tests skip, naming what is missing, when the binary is not there, unless ASTRAI_REQUIRE_AGENTS
is set (CI sets it after `make agents`): then a missing binary fails them. Each run gets its
own CODEX_HOME with a config.toml whose one model provider is the server's /v1 (the
Responses API), and a proxy that goes nowhere for anything but loopback, so it never
reaches the network.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.agents import require_agent, run_agent

CONFIG = """\
model = "{model}"
model_provider = "astrai"
model_context_window = {context}
check_for_update_on_startup = false

[model_providers.astrai]
name = "AstrAI Serve"
base_url = "{base_url}/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
stream_idle_timeout_ms = 600000

[analytics]
enabled = false
"""
# Codex's own warning for a model not in its catalog: an item, not an API error.
UNKNOWN_MODEL_WARNING = "Model metadata for"


def require_codex() -> Path:
    """The codex binary, or skip (fail under ASTRAI_REQUIRE_AGENTS) naming what lacks."""
    return require_agent("codex")


@dataclass
class CodexRun:
    """One `codex exec --json` session's events (its JSON lines) and exit status."""

    returncode: int
    events: list[dict[str, Any]]
    stderr: str

    def errors(self) -> list[str]:
        """Every error the session reported, Codex's unknown-model warning aside."""
        found = []
        for event in self.events:
            item = event.get("item") or {}
            if item.get("type") == "error" and not item["message"].startswith(
                UNKNOWN_MODEL_WARNING
            ):
                found.append(item["message"])
            elif event["type"] in ("turn.failed", "error"):
                found.append(json.dumps(event))
        return found

    def kinds(self) -> list[str]:
        return [event["type"] for event in self.events]


class Codex:
    """`codex exec` sessions in `workdir`, configured for the server at `base_url`."""

    def __init__(self, binary: Path, home: Path, workdir: Path, base_url: str, model: str):
        self.binary, self.home, self.workdir = binary, home, workdir
        home.mkdir(parents=True, exist_ok=True)
        workdir.mkdir(parents=True, exist_ok=True)
        config = CONFIG.format(model=model, context=32768, base_url=base_url)
        (home / "config.toml").write_text(config)

    def run(self, *args: str, timeout_s: float) -> CodexRun:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "CODEX_HOME": str(self.home),
            "OPENAI_API_KEY": "unused",
            # Anything but loopback goes to a port where nothing listens.
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9",
            "NO_PROXY": "127.0.0.1,localhost",
        }
        argv = [str(self.binary), "exec", "--json", "--skip-git-repo-check", *args]
        returncode, stdout, stderr = run_agent(argv, self.workdir, env, timeout_s)
        events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        return CodexRun(returncode, events, stderr)
