"""Each GGUF type llama-quantize makes of the default model, checked against llama-server."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from bench.bench_models import default_requantized
from bench.server import LlamaServer, terminate
from bench.types_bench import TEACHER_TEXT
from tests.e2e import gguf_argmax
from tests.e2e.llama_cpp import LlamaCpp, greedy_next_tokens, require_llama_cpp
from tests.worker.native import needs_ggml
from worker.model.default_model import default_model_path
from worker.model.model_dir import resolve_model_dir
from worker.text.tokenizer import Tokenizer

pytestmark = [pytest.mark.slow, needs_ggml]
# llama-quantize's names. The default model's 576-wide rows are not multiples of 256, so the
# K types land on its 1536-wide FFN rows only and the rest falls back (the "Q2_K" file holds
# Q4_0 and Q3_K, no Q2_K); every file still mixes several of ggml's types.
TYPES = (
    *("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"),
    *("Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"),
    *("F16", "BF16", "F32"),
)
MIN_AGREEMENT = 0.98
# Both sides round activations to 8 bits per block for ggml's quantized types, each after its
# own float sums, so a few codes land apart and the difference grows layer by layer (llama.cpp
# against itself at another micro-batch size agrees at 93-97%, BENCHMARKS); this small model has
# many near-ties (a third of the text's positions have their two best logits within 0.5):
# either may flip a choice away from the file's exact float32 arithmetic, and llama-server
# itself agrees with that at 93-100% of positions, per type. So a position agrees when
# llama-server's token is our argmax or within NEAR_TIE of its logit. Flips measured: at most
# 0.34 apart. Against llama-server on the Q8_0 file, the Q2_K file gets 83%, Q4_K_M's 96%.
NEAR_TIE = 0.5
RUNTIME_MIB = 400
# One thread, beside our one-thread child (gguf_argmax.start); one slot and a short context:
# the text fits, and the server starts in under a second.
LLAMA_SERVER_ARGS = ("-t", "1", "-np", "1", "-c", "256")


class Measured(NamedTuple):
    kind: str
    file_bytes: int
    ours: gguf_argmax.Argmax
    theirs: list[int]  # llama-server's greedy token after each prefix of the text


@pytest.fixture(scope="module")
def llama_cpp() -> LlamaCpp:
    return require_llama_cpp()


@pytest.fixture(scope="module")
def text_ids() -> list[int]:
    return Tokenizer(resolve_model_dir(default_model_path())).encode(TEACHER_TEXT)


@pytest.fixture(scope="module", params=TYPES)
def measured(request: pytest.FixtureRequest, llama_cpp: LlamaCpp, text_ids: list[int]) -> Measured:
    """One file, made once (cached beside the benchmarks'), through both: our engine in a
    child process while llama-server answers its one-token requests."""
    model = default_requantized(llama_cpp.quantize, request.param)
    child = gguf_argmax.start(model, text_ids)
    try:
        server = LlamaServer(llama_cpp.server, model, LLAMA_SERVER_ARGS).wait_ready(60)
        try:
            theirs = greedy_next_tokens(server, text_ids)
        finally:
            server.stop()
        ours = gguf_argmax.result(child, timeout_s=240)
    finally:
        terminate(child, 5.0)
    return Measured(request.param, Path(model).stat().st_size, ours, theirs)


def test_greedy_tokens_agree_with_llama_server(measured: Measured) -> None:
    """Top-1 under teacher forcing over a fixed text (~70 tokens): at each prefix, llama-server's
    greedy next token (a one-token, temperature-0 request with the ids as prompt) against the
    argmax of our engine's one forward over the text, at every position (the same file loaded
    as `astrai serve --model FILE` loads it: quantization auto, its own codes and kernels)."""
    ours, theirs = measured.ours, measured.theirs
    assert ours.quantization == "gguf", ours.quantization
    gaps = [
        logits[0] - logits[top.index(token)] if token in top else None
        for token, top, logits in zip(theirs, ours.top_ids, ours.top_logits, strict=True)
    ]
    n = len(gaps)
    exact = sum(token == top[0] for token, top in zip(theirs, ours.top_ids, strict=True)) / n
    near = sum(gap is not None and gap <= NEAR_TIE for gap in gaps) / n
    flips = {i: gap if gap is None else round(gap, 3) for i, gap in enumerate(gaps) if gap != 0.0}
    print(f"{measured.kind}: top-1 {exact:.1%}, within {NEAR_TIE} {near:.1%}, flips {flips}")
    assert near >= MIN_AGREEMENT, (
        f"{measured.kind}: llama-server's greedy token is ours at {exact:.1%} of "
        f"{n} positions, within {NEAR_TIE} of our best logit at {near:.1%}, under "
        f"{MIN_AGREEMENT:.0%}; our gap to its token by position: {flips}; {ours.weight_paths}"
    )


def test_worker_memory_within_file_kv_and_runtime(measured: Measured) -> None:
    """Worker RSS <= file + KV cache + 400 MiB. Measured in the child above, a process that
    does what a worker does to hold the file (our engine: imports, tokenizer, load, a KV cache
    of gguf_argmax.KV_CACHE_MB) and one forward over the text: its peak RSS (VmHWM, the load's
    transient included: what the machine must have free) against the file, every byte of KV
    cache it held, and the runtime. The child's one thread changes its peak by under 3 MiB;
    the worker of `astrai serve --kv-cache-mb 16` peaked 4 MiB above it on the Q4_1 file and
    14 MiB below on the F16 one (the child's logits at every position): close enough that a
    server start per type (~8 s) would add no other figure. On a fresh cache, as in CI, each
    child also converts its file's tokenizer and the first one runs the kernel probe: on a
    2-core Zen 4 every type held the rule by 54-89 MiB, F32 by 42 (docs/bench/HISTORY.md,
    "Worker memory at load: the first start of a file, and a busy CPU (fourteenth session,
    2026-12-02)"): a tied table is held once, each tensor copied into a kernel's
    layout has its file pages handed back as soon as it is copied (worker/model/gguf_model.py),
    and the probe's, the tokenizer conversion's and the load's freed buffers go back too."""
    ours, mib = measured.ours, 2**20
    limit = measured.file_bytes + ours.kv_bytes + RUNTIME_MIB * mib
    peak, end = ours.peak_rss_bytes / mib, ours.rss_bytes / mib
    figures = f"RSS peak {peak:.0f} MiB, at the end {end:.0f}, rule {limit / mib:.0f}"
    print(f"{measured.kind}: {figures}")
    assert ours.peak_rss_bytes <= limit, (
        f"{measured.kind}: {figures} (file {measured.file_bytes / mib:.0f} + KV "
        f"{ours.kv_bytes / mib:.0f} + {RUNTIME_MIB})"
    )
