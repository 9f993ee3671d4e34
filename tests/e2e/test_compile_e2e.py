"""`astrai serve --compile` streams the same greedy text as the eager worker, over HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow
BODY = {
    "messages": [{"role": "user", "content": "Describe a lighthouse."}],
    "max_tokens": 16,
    "temperature": 0,
    "ignore_eos": True,
}


def complete(server: Server) -> str:
    response = httpx.post(f"{server.url}/v1/chat/completions", json=BODY, timeout=60)
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


def test_compiled_worker_answers_like_the_eager_one(tiny_server: Server, tiny_model_dir: Path):
    server = Server(
        "serve",
        "--model",
        str(tiny_model_dir),
        "--dtype",
        "float32",
        "--kv-cache-mb",
        "16",
        "--compile",
    )
    try:
        server.wait_ready()
        assert complete(server) == complete(tiny_server)
    finally:
        server.stop()
        assert not server.group_alive()
