"""Our log-probabilities on a GGUF against llama.cpp's own on the same file and text.

llama-perplexity (built beside llama-server) saves llama.cpp's log-probabilities for the
second half of each 512-token chunk of the fixed text; our engine runs the same chunks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.accuracy import FIXED_TEXT
from bench.bench_models import default_requantized
from bench.llama_agreement import (
    added_bos,
    against_llama,
    argmax_agreement,
    distance,
    llama_rows,
    our_log_probs,
)
from bench.llama_logits import llama_log_probs
from tests.e2e.llama_cpp import LlamaCpp, require_llama_cpp
from tests.worker.native import needs_ggml
from worker.model.default_model import default_model_path
from worker.model.loader import load_model
from worker.model.model_dir import resolve_model_dir

pytestmark = [pytest.mark.slow, needs_ggml]
# llama.cpp's plain float32 arithmetic: a float32 KV cache (its default is float16) and
# attention without its flash kernel (which rounds queries to float16).
FLOAT32_SETTINGS = ("-fa", "off", "-ctk", "f32", "-ctv", "f32")


@pytest.fixture(scope="module")
def llama_cpp() -> LlamaCpp:
    return require_llama_cpp()


def test_a_float32_file_s_log_probabilities_equal_llama_cpp_s(
    llama_cpp: LlamaCpp, tmp_path: Path
) -> None:
    """With nothing rounded to 8 or 16 bits on either side, the two implementations give the
    same distribution at every scored position: the rows, tokens and positions line up."""
    path = default_requantized(llama_cpp.quantize, "F32")
    settings = (*FLOAT32_SETTINGS, "--chunks", "2")  # two 128-token chunks: rows 64..126
    llama = llama_log_probs(
        llama_cpp.perplexity, path, FIXED_TEXT, tmp_path, n_ctx=128, extra=settings
    )
    assert llama.log_probs.shape[:2] == (2, 63), llama.log_probs.shape
    model = load_model(resolve_model_dir(path), torch.float32, torch.device("cpu"))
    ours = our_log_probs(model, llama, added_bos(path))
    theirs, targets = llama_rows(llama)
    assert argmax_agreement(ours, theirs) == 1.0
    result = distance(theirs, ours, targets)
    assert result.largest_deviation < 0.01, result
    assert result.perplexity == pytest.approx(distance(ours, ours, targets).perplexity, rel=1e-3)


def test_the_default_file_under_8_bit_activations_is_as_close_to_float32_as_llama_cpp(
    llama_cpp: LlamaCpp, tmp_path: Path
) -> None:
    """The default precision is the file's own arithmetic (8-bit activations per block, as
    ggml's): its distance from the file's float32 reading is llama.cpp's, within the
    issue's 1.5x. Top-1 against llama.cpp is bounded by how float rounding moves 8-bit codes:
    llama.cpp against itself at a 32-row micro-batch agrees at 95-97% (BENCHMARKS), so the
    floor here sits under that."""
    path = default_model_path()
    llama = llama_log_probs(llama_cpp.perplexity, path, FIXED_TEXT, tmp_path)
    result = against_llama(resolve_model_dir(path), llama, added_bos(path))
    print(result)
    assert result.top1 >= 0.94, result
    assert result.ours.largest_deviation <= 1.5 * result.llama.largest_deviation, result
    assert result.ours.kl_divergence <= 1.5 * result.llama.kl_divergence, result
    assert result.ours.perplexity == pytest.approx(result.llama.perplexity, rel=0.02), result
