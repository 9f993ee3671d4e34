"""llama.cpp's own llama-server, llama-quantize and llama-perplexity, which `make llama-cpp`
builds and caches.

The tests skip when they are not built, unless ASTRAI_REQUIRE_LLAMA_CPP is set (CI sets it
after `make llama-cpp`, where cmake and a C++ compiler are): then their absence fails them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from bench.server import REPO, LlamaServer
from bench.types_bench import post


class LlamaCpp(NamedTuple):
    server: Path
    quantize: Path
    perplexity: Path


def require_llama_cpp() -> LlamaCpp:
    """The cached binaries, or skip (fail under ASTRAI_REQUIRE_LLAMA_CPP) naming what lacks."""
    script = REPO / "bench" / "build_llama_server.sh"
    found = subprocess.run(
        [str(script), "--cached"], capture_output=True, text=True, timeout=30, check=False
    )
    if found.returncode == 0:
        server = Path(found.stdout.strip().splitlines()[-1])
        return LlamaCpp(
            server, server.parent / "llama-quantize", server.parent / "llama-perplexity"
        )
    reason = f"{found.stderr.strip()}: `make llama-cpp` builds them (~15-20 min on 2 cores)"
    if os.environ.get("ASTRAI_REQUIRE_LLAMA_CPP"):
        pytest.fail(f"ASTRAI_REQUIRE_LLAMA_CPP is set but there is {reason}")
    pytest.skip(reason)


def greedy_next_tokens(server: LlamaServer, ids: list[int]) -> list[int]:
    """llama-server's greedy next token after each prefix of `ids` (ids[:1], ..., ids[:n]):
    one one-token request per prefix, as token ids; its prompt cache keeps the prefix, so
    each request evaluates one new token."""
    chosen = []
    for end in range(1, len(ids) + 1):
        body = {"prompt": ids[:end], "n_predict": 1, "temperature": 0, "return_tokens": True}
        [token] = post(f"{server.url}/completion", body, timeout=60)["tokens"]
        chosen.append(int(token))
    return chosen
