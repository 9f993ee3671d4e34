"""`--attention flex` (the CUDA default) through the whole stack: real processes, the real
model, HTTP; on the CPU it runs torch's reference kernel and must answer as gathering does."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.harness import Server, engine_device
from worker.engine.inference_engine import InferenceEngine

pytestmark = pytest.mark.slow
MODEL = "SmolLM2-135M-Instruct"
SYSTEM = {"role": "system", "content": "You are a patient teacher who answers in one sentence."}
QUESTIONS = [
    [SYSTEM, {"role": "user", "content": "What is the capital of France?"}],
    [SYSTEM, {"role": "user", "content": "Why is the sky blue?"}],
]


def test_flex_attention_serves_the_answers_of_gathered_attention():
    # float32 on any device (bench/gpu_check.sh runs this on CUDA, whose default is bf16) and
    # float32 activations (precision exact): the two attentions then differ by rounding alone,
    # which 8-bit activations could turn into a different code, and a different greedy token.
    # A small cache (176 rows), as the CPU's reference flex kernel computes every query against
    # every cache row. No drafts: their
    # decode-cost probe would time the reference kernel at eight batch sizes (~10 s here).
    options = ("--kv-cache-mb", "8", "--dtype", "float32", "--speculative-tokens", "0")
    options += ("--precision", "exact")
    server = Server("serve", *options, "--attention", "flex")
    try:
        server.wait_ready()
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        served = []
        for messages in QUESTIONS:  # the second reuses the first's system-prompt pages
            stream = client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=12, temperature=0, stream=True
            )
            served.append("".join(c.choices[0].delta.content or "" for c in stream))
        assert "Paris" in served[0]
        [worker] = server.stats()["workers"]
        assert int(worker["prefix_cache_hit_tokens"]) > 0
    finally:
        server.stop()
        assert not server.group_alive()
    with InferenceEngine(
        kv_cache_mb=8,
        attention="gather",
        dtype="float32",
        precision="exact",
        speculative_tokens=0,
        device=engine_device(),
    ) as engine:
        assert [engine.generate(m, max_tokens=12, temperature=0) for m in QUESTIONS] == served
