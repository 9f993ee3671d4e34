"""A GGUF of the types people bring, through `astrai serve`: the default model requantized to
a Q4_0 / Q4_K / Q5_0 / Q5_1 mix, served in its own codes; a truncated file refused."""

from __future__ import annotations

import subprocess
import sys

import openai
import pytest
import torch

from bench.accuracy import sequence_logits
from common.ports import free_loopback_port
from tests.e2e.harness import REPO, Server
from tests.worker.model_factory import requantize_gguf
from tests.worker.native import needs_ggml
from worker.engine.inference_engine import InferenceEngine
from worker.kernels.kquant_probe import gemv_available
from worker.kernels.plan import kernel_plan
from worker.model.default_model import default_model_path
from worker.model.kernel_probe import measure
from worker.model.loader import load_model
from worker.model.model_dir import resolve_model_dir

pytestmark = [pytest.mark.slow, needs_ggml]
# Woven Q4_0 beside Q5_1 (ggml's interleaved kernels, its vec_dot), Q4_0 alone (our Q5_0
# kernel on its codes plus 8), Q4_K (our gemv or ggml's interleaved kernel), Q5_0 (our Q5_0
# kernel on its blocks), and the default file's Q8_0 embedding and output layer (ours), all in
# one file.
MIX = {
    "attn_q.weight": "Q4_0",
    "attn_k.weight": "Q4_0",
    "attn_v.weight": "Q5_1",
    "attn_output.weight": "Q5_0",
    "ffn_gate.weight": "Q4_0",
    "ffn_up.weight": "Q4_0",
    "ffn_down.weight": "Q4_K",
}
# What multiplies a Q4_K layer's few rows: our 8-bit gemv where the CPU has AVX2.
Q4_K_FEW_ROWS = "8-bit gemv" if gemv_available() else "ggml interleaved"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
TEXT = (
    "The city library opens at nine in the morning and closes at six in the evening. "
    "Visitors may borrow up to five books at a time for three weeks."
)


@pytest.fixture(scope="module")
def mixed_file(tmp_path_factory):
    return requantize_gguf(
        default_model_path(), tmp_path_factory.mktemp("gguf") / "smollm2-mix.gguf", MIX
    )


def test_a_mixed_type_file_is_served_in_its_own_codes(mixed_file):
    # One row per decode step on both sides: ggml's interleaved kernels multiply groups of
    # four rows (gemm) and single rows (gemv) with different rounding, so a drafted verify
    # forward may round a near-tie differently from one-row steps.
    server = Server(
        "serve", "--model", str(mixed_file), "--kv-cache-mb", "64", "--speculative-tokens", "0"
    )
    try:
        server.wait_ready(timeout_s=300)
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        [model] = [m.id for m in client.models.list()]
        assert model == "smollm2-mix"  # named after the file
        reply = client.chat.completions.create(
            model=model, messages=QUESTION, max_tokens=24, temperature=0
        )
        served = reply.choices[0].message.content
        [worker] = server.stats()["workers"]
        rss_kib = next(
            int(line.split()[1])
            for line in open(f"/proc/{worker['pid']}/status")  # noqa: SIM115
            if line.startswith("VmRSS")
        )
    finally:
        server.stop()
    engine = InferenceEngine(mixed_file, kv_cache_mb=64, speculative_tokens=0)
    try:
        assert engine.quantization == "gguf"
        paths = engine.model.weight_paths
        assert f"Q4_K x30 → {Q4_K_FEW_ROWS}" in paths and "Q5_1 x30 → ggml vec_dot" in paths
        assert "Q5_0 x30 → native Q5_0 kernel, 8-bit activations" in paths
        assert "Q4_0 x60 → native Q5_0 kernel on its codes as Q5_0, 8-bit activations" in paths
        assert "Q4_0 x60 → ggml interleaved" in paths
        assert "Q8_0 x1 → native Q8_0 kernel" in paths
        expected = engine.generate(QUESTION, max_tokens=24, temperature=0)
    finally:
        engine.shutdown()
    assert served == expected and served
    # No float copy of the weights: the worker holds about the file, not 4x it in float32.
    assert rss_kib * 1024 < 4 * 4 * 135e6 / 2


def test_the_codes_keep_the_files_own_top1_choice(mixed_file):
    """Against the same file dequantized to float32: only the activations' 8-bit blocks differ."""
    folder = resolve_model_dir(mixed_file)
    ids = resolve_tokens(folder)
    ours = sequence_logits(
        load_model(folder, torch.float32, torch.device("cpu"), quantization="gguf"), ids
    )
    reference = sequence_logits(load_model(folder, torch.float32, torch.device("cpu")), ids)
    agreement = (ours.argmax(-1) == reference.argmax(-1)).float().mean().item()
    assert agreement >= 0.9, agreement


def test_the_k_quant_panel_kernels_serve_what_the_engine_computes(mixed_file, monkeypatch):
    """Every row of the Q4_K layers on our panel kernel, pinned by ASTRAI_KQUANT_PANEL_ROWS
    (the probe picks from how many rows on this CPU): served as in-process, and closer to
    the float32 model than ggml's 8-bit activations, top-1 over a text."""
    monkeypatch.setenv("ASTRAI_KQUANT_PANEL_ROWS", "1")
    kernel_plan.cache_clear()
    server = Server(
        "serve", "--model", str(mixed_file), "--kv-cache-mb", "64", "--speculative-tokens", "0"
    )
    try:
        server.wait_ready(timeout_s=300)
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="smollm2-mix", messages=QUESTION, max_tokens=24, temperature=0
        )
        served = reply.choices[0].message.content
    finally:
        server.stop()
    engine = InferenceEngine(mixed_file, kv_cache_mb=64, speculative_tokens=0)
    try:
        assert f"Q4_K x30 → {Q4_K_FEW_ROWS}" in engine.model.weight_paths
        assert "panel kernel from 1 rows" in engine.model.weight_paths
        expected = engine.generate(QUESTION, max_tokens=24, temperature=0)
    finally:
        engine.shutdown()
        kernel_plan.cache_clear()
    assert served == expected and served
    folder = resolve_model_dir(mixed_file)
    ids = resolve_tokens(folder)
    panels = load_model(
        folder, torch.float32, torch.device("cpu"), quantization="gguf", plan=kernel_plan(measure)
    )
    reference = sequence_logits(load_model(folder, torch.float32, torch.device("cpu")), ids)
    agreement = (sequence_logits(panels, ids).argmax(-1) == reference.argmax(-1)).float().mean()
    assert agreement.item() >= 0.9


def resolve_tokens(folder) -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))(TEXT)["input_ids"]


def test_a_truncated_file_stops_serve_with_one_line_naming_it(mixed_file, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(mixed_file.read_bytes()[: mixed_file.stat().st_size // 2])
    port = str(free_loopback_port())
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "serve", "--model", str(cut), "--port", port],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Traceback" not in output
    assert f"cannot serve the model: {cut}: truncated: tensor blk." in output
