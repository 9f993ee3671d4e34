"""`--kv-cache-dtype float16` and `q8_0` through the whole stack: real processes, the real
model, HTTP."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.e2e.harness import Server, engine_device
from worker.engine.inference_engine import InferenceEngine
from worker.model.loader import load_config
from worker.model.model_dir import resolve_model_dir

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


def test_a_q8_0_cache_holds_a_quarter_rows_answers_and_comes_back_from_disk(tmp_path: Path):
    """`--kv-cache-dtype q8_0`: 8-bit rows (68 bytes a 64-value head row instead of 256), so
    the same memory holds 256 / 68 as many pages as float32; the answer is right; a restarted
    server reads the prompt's q8_0 pages back from its disk tier and answers the same."""
    folder = tmp_path / "kv"
    args = ("serve", "--kv-cache-mb", "64", "--kv-cache-dtype", "q8_0", "--kv-disk-dir")
    system = " ".join(f"Fact {i}: the river number {i} flows north." for i in range(40))
    messages = [{"role": "system", "content": system}, *QUESTIONS[0]]
    answers, cached = [], []
    for _ in range(2):
        server = Server(*args, str(folder))
        try:
            server.wait_ready()
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
            reply = client.chat.completions.create(
                model=MODEL,
                messages=messages,
                max_tokens=24,
                temperature=0,  # type: ignore[arg-type]
            )
            answers.append(reply.choices[0].message.content)
            details = reply.usage.prompt_tokens_details if reply.usage else None
            cached.append(details.cached_tokens if details else None)
            [worker] = server.stats()["workers"]
            pages = int(worker["kv_pages_total"])
        finally:
            server.stop()
            assert not server.group_alive()
    config = load_config(resolve_model_dir(None))
    row_bytes = config.num_kv_heads * config.head_dim // 32 * 34
    assert pages == (64 << 20) // (2 * config.num_layers * row_bytes * 16)  # 16-token pages
    assert "Berlin" in (answers[0] or "")
    assert answers[1] == answers[0]
    assert cached[0] == 0 and (cached[1] or 0) >= 400  # the system prompt's full pages
