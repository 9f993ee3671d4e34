"""`--compile` through the whole stack: real processes and HTTP, the decode step compiled
before the worker registers, giving the tokens the eager engine gives (the flag's way to the
worker: tests/launcher/test_options_round_trip.py; the graphs' count and that every step
takes them: tests/worker/engine/test_compiled_decode.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import TINY_NAME
from tests.e2e.harness import Server
from worker.engine.inference_engine import InferenceEngine

pytestmark = pytest.mark.slow
# The fastest single-stream setup (the 4-bit codes, bf16 activations), on the tiny model:
# compiling the default model's 30 layers took minutes of the suite on 2 cores, and the
# graphs are the same code. No drafted rows: whether a step feeds guesses follows this CPU's
# measured step costs, which would change the batches the graphs see.
OPTIONS = {"dtype": "bfloat16", "quantization": "int4", "kv-cache-mb": 16, "speculative-tokens": 0}
PROMPTS = ["Tell me about the sea.", "Count to five."]
MAX_TOKENS = 12


def test_a_compiled_worker_answers_as_the_eager_engine(tiny_model_dir: Path):
    engine_options = {name.replace("-", "_"): value for name, value in OPTIONS.items()}
    with InferenceEngine(tiny_model_dir, **engine_options) as eager:
        expected = [eager.generate(p, temperature=0, max_tokens=MAX_TOKENS) for p in PROMPTS]
    argv = [item for name, value in OPTIONS.items() for item in (f"--{name}", str(value))]
    server = Server("serve", "--model", str(tiny_model_dir), *argv, "--compile")
    try:
        server.wait_ready(timeout_s=600)
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)

        def ask(prompt: str, stream: bool) -> Any:
            # As the engine's generate(prompt) asks: one user turn through the chat template.
            messages = [{"role": "user", "content": prompt}]
            return client.chat.completions.create(
                model=TINY_NAME,
                messages=messages,
                max_tokens=MAX_TOKENS,
                temperature=0,
                stream=stream,
            )

        assert ask(PROMPTS[0], False).choices[0].message.content == expected[0]  # one sequence
        # Both streams in flight at once take the several-sequence graph.
        streams = [ask(p, True) for p in PROMPTS]
        together = ["".join(c.choices[0].delta.content or "" for c in s) for s in streams]
        assert together == expected
    finally:
        server.stop()
        assert not server.group_alive()
