"""`--kv-cache-dtype float16` through the whole stack: real processes, the real model, HTTP."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.harness import Server, engine_device
from worker.engine.inference_engine import InferenceEngine

pytestmark = pytest.mark.slow
MODEL = "SmolLM2-135M-Instruct"
QUESTIONS = [
    # A question the default file answers right in either precision (under precision file,
    # its default, "the capital of France" starts as llama-server's answer does: not Paris).
    [{"role": "user", "content": "What is the capital of Germany?"}],
    [{"role": "user", "content": "Name three colours and say why you like them."}],
]


def test_a_float16_cache_holds_twice_the_tokens_and_answers_as_in_process():
    server = Server("serve", "--kv-cache-mb", "64", "--kv-cache-dtype", "float16")
    try:
        server.wait_ready()
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        served = []
        for messages in QUESTIONS:
            stream = client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=32, temperature=0, stream=True
            )
            served.append("".join(c.choices[0].delta.content or "" for c in stream))
        assert "Berlin" in served[0]
        [worker] = server.stats()["workers"]
        pages = int(worker["kv_pages_total"])
    finally:
        server.stop()
        assert not server.group_alive()
    # In-process, the same cache (on the CPU, float16 decode through the native kernel) gives
    # the same text; a float32 cache of the same memory holds half the pages.
    device = engine_device()
    with InferenceEngine(kv_cache_mb=64, kv_cache_dtype="float16", device=device) as engine:
        assert engine.cache.storage.k.dtype.itemsize == 2
        assert [engine.generate(m, max_tokens=32, temperature=0) for m in QUESTIONS] == served
    with InferenceEngine(
        kv_cache_mb=64, kv_cache_dtype="float32", speculative_tokens=0, device=device
    ) as engine:
        assert engine.get_stats()["kv_pages_total"] * 2 == pages
