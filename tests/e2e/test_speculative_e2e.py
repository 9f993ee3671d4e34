"""Drafted tokens through the whole stack: real processes, the real model, HTTP and /stats."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.harness import Server, engine_device, wait_until
from worker.engine.inference_engine import InferenceEngine

pytestmark = pytest.mark.slow
MODEL = "SmolLM2-135M-Instruct"
# The small model copies this list over and over: its own earlier text drafts the rest.
COPY = [
    {
        "role": "user",
        "content": "Copy this list exactly: apples, pears, plums, apples, pears, plums, "
        "apples, pears.",
    }
]


def kept_drafts(server: Server) -> int:
    [worker] = server.stats()["workers"]
    return int(worker["accepted_draft_tokens"])


def test_a_stream_that_copies_its_input_keeps_drafts_and_its_text(
    default_server: Server,
):
    client = openai.OpenAI(base_url=f"{default_server.url}/v1", api_key="unused", max_retries=0)
    before = kept_drafts(default_server)
    stream = client.chat.completions.create(
        model=MODEL, messages=COPY, max_tokens=60, temperature=0, stream=True
    )
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    reply = client.chat.completions.create(model=MODEL, messages=COPY, max_tokens=60, temperature=0)
    assert reply.choices[0].message.content == streamed
    assert reply.usage is not None and reply.usage.completion_tokens == 60
    # Worker figures reach /stats with the next heartbeat (every 0.5 s).
    assert wait_until(lambda: kept_drafts(default_server) > before + 20, 5)
    # The same request in-process with drafting off: the same text, token for token.
    with InferenceEngine(speculative_tokens=0, kv_cache_mb=64, device=engine_device()) as engine:
        plain = engine.generate(COPY, max_tokens=60, temperature=0)
        assert engine.get_stats()["draft_tokens"] == 0
    assert streamed == plain
