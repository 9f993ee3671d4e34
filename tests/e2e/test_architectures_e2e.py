"""Gemma 2 and Phi-3 GGUFs in K-quants through `astrai serve`: real processes, real HTTP, the
served greedy text equal to the same file's in-process engine (itself held to transformers'
`generate` in tests/worker/engine/test_architectures.py)."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.e2e.harness import Server
from tests.worker.model_factory import hf_model, write_gguf
from tests.worker.native import needs_ggml
from worker.engine.inference_engine import InferenceEngine

pytestmark = [pytest.mark.slow, needs_ggml]
# Rows of whole 256-value super-blocks, as the K-quants need; Q4_K mostly, Q6_K for v and
# down as llama-quantize's Q4_K_M writes them, Q8_0 for Phi-3's fused q/k/v (our kernel).
SHAPE = {"hidden_size": 256, "intermediate_size": 512, "head_dim": 64, "vocab_size": 256}
TYPES = {
    "token_embd.weight": "Q4_K",
    "attn_q.weight": "Q4_K",
    "attn_k.weight": "Q4_K",
    "attn_v.weight": "Q6_K",
    "attn_qkv.weight": "Q8_0",
    "attn_output.weight": "Q4_K",
    "ffn_gate.weight": "Q4_K",
    "ffn_up.weight": "Q4_K",
    "ffn_down.weight": "Q6_K",
}
PROMPT = "The library opens at nine and closes at six; visitors may borrow five books."
GREEDY = {"temperature": 0, "max_tokens": 24}


@pytest.mark.parametrize("arch", ["gemma2", "phi3"])
def test_a_quantized_file_is_served_as_the_engine_computes_it(arch: str, tmp_path: Path):
    # Gemma's window of 8 is well inside the prompt: its sliding layers read a mask of their own.
    overrides = {"query_pre_attn_scalar": 64} if arch == "gemma2" else {}
    gguf = write_gguf(
        hf_model(arch, seed=5, **SHAPE, **overrides), tmp_path / f"{arch}.gguf", TYPES
    )
    server = Server("serve", "--model", str(gguf), "--kv-cache-mb", "16")
    try:
        server.wait_ready(timeout_s=300)
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        [model] = [m.id for m in client.models.list()]
        reply = client.completions.create(
            model=model, prompt=PROMPT, extra_body={"ignore_eos": True}, **GREEDY
        )
    finally:
        server.stop()
    assert reply.usage.completion_tokens == GREEDY["max_tokens"]
    with InferenceEngine(gguf, kv_cache_mb=16) as engine:
        assert engine.quantization == "gguf"
        assert "Q4_K" in engine.model.weight_paths and "Q6_K" in engine.model.weight_paths
        expected = engine.generate(PROMPT, chat=False, ignore_eos=True, **GREEDY)
    assert reply.choices[0].text == expected
