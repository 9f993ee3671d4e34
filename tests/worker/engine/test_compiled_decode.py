"""--compile: the compiled decode step gives the eager step's tokens, for one row and several."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from worker.engine.compiled_decode import CompiledDecode
from worker.engine.inference_engine import InferenceEngine
from worker.model.batch import ForwardBatch

PROMPTS = ["Hi", "Tell me about the sea.", "Count to five."]


def greedy(engine: InferenceEngine) -> tuple[str, list[str]]:
    alone = engine.generate(PROMPTS[1], temperature=0, max_tokens=12)
    together = ["", "", ""]  # streamed: the three decode in one batch
    for index, text in engine.generate(PROMPTS, stream=True, temperature=0, max_tokens=12):
        together[index] += text
    return alone, together


@pytest.mark.slow
def test_compiled_decode_matches_eager_on_one_and_several_sequences(tiny_model_dir: Path):
    # No drafted rows: whether a step feeds guesses follows this CPU's measured step costs,
    # and with them the three sequences' steps have 4-8 rows instead of 3.
    options = {
        "dtype": "bfloat16",
        "quantization": "int4",
        "kv_cache_mb": 16,
        "speculative_tokens": 0,
    }
    with InferenceEngine(tiny_model_dir, **options) as eager:
        expected = greedy(eager)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with InferenceEngine(tiny_model_dir, compile=True, **options) as compiled:
        # The warm-up's graphs and no more: the startup probe of drafted rows runs through
        # them (plain tensors, not inference ones, once recompiled both for it).
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs == 2
        runner = compiled.scheduler.runner
        assert isinstance(runner.compiled_decode, CompiledDecode)
        calls: list[int] = []
        runner.compiled_decode = _Wrapped(runner.compiled_decode, calls)
        # The warm-up compiled every graph: a request that needs another one fails here.
        with torch._dynamo.config.patch(error_on_recompile=True):
            assert greedy(compiled) == expected
        # The warm-up left no k/v behind and every decode step took the compiled path.
        assert {1, 3} <= set(calls)
        assert compiled.get_stats()["kv_pages_in_use"] == 0


class _Wrapped:
    """Counts the batch sizes the runner hands to the compiled step."""

    def __init__(self, inner: CompiledDecode, calls: list[int]) -> None:
        self.inner, self.calls = inner, calls

    def handles(self, batch: ForwardBatch) -> bool:
        return self.inner.handles(batch)

    def __call__(
        self, input_ids: torch.Tensor, batch: ForwardBatch, kv_layers: list
    ) -> torch.Tensor:
        self.calls.append(batch.num_seqs)
        return self.inner(input_ids, batch, kv_layers)


def test_only_few_row_decode_steps_are_compiled():
    def batch(num_seqs: int, query_len: int) -> ForwardBatch:
        empty = torch.zeros(num_seqs, 1, dtype=torch.int64)
        return ForwardBatch(
            empty[:, 0], empty[:, 0], empty, empty.bool(), None, empty[:, 0], query_len
        )

    assert CompiledDecode.handles(batch(1, 1)) and CompiledDecode.handles(batch(15, 1))
    assert not CompiledDecode.handles(batch(16, 1))  # compute bound: eager float32
    assert not CompiledDecode.handles(batch(2, 5))  # prefill
