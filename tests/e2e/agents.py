"""The coding agents `make agents` installs (npm packages in $AGENTS_DIR), run as their own
binaries against a local server: kept off the network, in a throwaway home, time-bounded.

The tests skip when a binary is missing, unless ASTRAI_REQUIRE_AGENTS is set (CI sets it,
after `make agents`): then a missing binary fails them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

DEFAULT_AGENTS_DIR = Path.home() / ".cache" / "astrai" / "agents"
# Claude Code asks for max_tokens 32000; this caps what it asks for, so that a session on a
# CPU ends in seconds (the server would clamp 32000 to what the context leaves anyway).
CLAUDE_MAX_OUTPUT_TOKENS = 16


def require_agent(name: str) -> Path:
    """The agent's binary, or skip (fail under ASTRAI_REQUIRE_AGENTS) naming what lacks."""
    folder = Path(os.environ.get("AGENTS_DIR") or DEFAULT_AGENTS_DIR)
    binary = folder / "node_modules" / ".bin" / name
    if binary.is_file():
        return binary
    reason = f"no {name} under {folder}/node_modules/.bin: `make agents` installs it"
    if os.environ.get("ASTRAI_REQUIRE_AGENTS"):
        pytest.fail(f"ASTRAI_REQUIRE_AGENTS is set but there is {reason}")
    pytest.skip(reason)


def claude_environment(base_url: str, home: Path) -> dict[str, str]:
    """Claude Code's environment: this server only, no telemetry or updates, its own home."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "x",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(CLAUDE_MAX_OUTPUT_TOKENS),
    }


def run_claude(
    binary: Path, base_url: str, home: Path, *args: str, timeout_s: float = 240.0
) -> dict[str, Any]:
    """`claude -p … --output-format json` in `home`; its result object (the process must exit 0)."""
    home.mkdir(parents=True, exist_ok=True)
    argv = [str(binary), *args, "--output-format", "json"]
    returncode, stdout, stderr = run_agent(
        argv, home, claude_environment(base_url, home), timeout_s
    )
    result: dict[str, Any] | None = None
    with contextlib.suppress(json.JSONDecodeError):
        result = json.loads(stdout)
    # Exit 1 with a result object: the session ended on an error it reports (the caller
    # judges it); anything else is a failure here.
    reported = returncode == 1 and isinstance(result, dict) and result.get("type") == "result"
    assert returncode == 0 or reported, (
        f"claude exited {returncode}: {stderr[-2000:]}{stdout[-2000:]}"
    )
    assert result is not None
    return result


def run_agent(
    argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float
) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of an agent's session, in its own process group: the
    npm launcher, the native binary and any command it ran all go when it ends or runs out
    of time."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return process.returncode, stdout, stderr
