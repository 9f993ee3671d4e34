"""Embeddings through the engine on a random-weight Qwen3 sentence-transformers folder:
our pooled vectors equal transformers' own last hidden state pooled the same way, in chunks
smaller than the inputs, beside generations, from the prefix cache, with no page kept."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedModel

from common.embedding import EmbedSettings
from tests.worker.embedding_model import (
    build_embedding_model,
    reference_embedding,
    reference_model,
)
from tests.worker.model_factory import hf_model, random_tokens, write_gguf
from worker.engine.inference_engine import InferenceEngine
from worker.engine.sequence import TokenEvent
from worker.errors import RequestError
from worker.model.pooling import ModelPooling, Pooling

pytestmark = pytest.mark.slow
TOL = 1e-4
CHUNK = 16  # the prefill token budget: the 40-token input takes three forwards
INPUTS: list[str | list[int]] = [
    list(range(100, 103)),
    list(range(200, 210)),
    list(range(300, 340)),
    [7],
    "The quick brown fox jumps over the lazy dog.",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Path:
    return build_embedding_model(
        tmp_path_factory.mktemp("embed") / "qwen3-embed", default_model_dir
    )


@pytest.fixture(scope="module")
def reference(folder: Path) -> PreTrainedModel:
    return reference_model(folder)


def engine(folder: Path, **options: object) -> InferenceEngine:
    budgets = {"prefill_token_budget": CHUNK, "idle_prefill_token_budget": CHUNK}
    options = {"dtype": "float32", "kv_cache_mb": 16, **budgets, **options}
    return InferenceEngine(folder, **options)


@pytest.fixture(scope="module")
def last(folder: Path) -> Iterator[InferenceEngine]:
    """The folder's own pooling: last token, normalized (its modules.json)."""
    with engine(folder) as running:
        yield running


def token_ids(engine: InferenceEngine, item: str | list[int]) -> list[int]:
    return item if isinstance(item, list) else engine.requests.prompt_token_ids(item, chat=False)


@pytest.mark.parametrize("pooling", ["last", "mean", "cls"])
def test_pooled_vectors_equal_transformers_for_a_batch_of_inputs_in_small_chunks(
    folder: Path, reference: PreTrainedModel, pooling: str
):
    # last: what the folder states; mean and cls: --pooling over it, still normalized.
    with engine(folder, pooling=None if pooling == "last" else pooling) as running:
        assert running.embeddings.pooling.pooling == pooling
        vectors = running.embed(INPUTS)
        stats = running.get_stats()
        ids = [token_ids(running, item) for item in INPUTS]
    assert max(map(len, ids)) > 2 * CHUNK
    for tokens, vector in zip(ids, vectors, strict=True):
        expected = reference_embedding(reference, tokens, pooling)
        assert vector.shape == (64,) and vector.dtype == torch.float32
        assert (vector - expected).abs().max().item() < TOL
        assert vector.norm().item() == pytest.approx(1.0, abs=1e-6)
    assert (stats["total_embeddings"], stats["kv_pages_in_use"]) == (len(INPUTS), 0)
    assert stats["total_tokens"] == 0  # nothing was sampled


def test_dimensions_are_the_first_components_scaled_to_unit_length(
    last: InferenceEngine, reference: PreTrainedModel
):
    [vector] = last.embed([INPUTS[2]], dimensions=8)
    expected = reference_embedding(reference, list(INPUTS[2]), "last", dimensions=8)
    assert vector.shape == (8,) and (vector - expected).abs().max().item() < TOL


def embed_events(
    engine: InferenceEngine, inputs: list[str | list[int]], rid: str
) -> list[TokenEvent]:
    done = threading.Semaphore(0)
    events: list[TokenEvent] = []

    def sink(event: TokenEvent) -> None:
        events.append(event)
        done.release()

    engine.submit_embeddings(inputs, sink, rid)
    for _ in inputs:
        assert done.acquire(timeout=60)
    return sorted(events, key=lambda e: e.index)


def test_a_last_token_embedding_reads_an_earlier_inputs_pages_from_the_prefix_cache(
    last: InferenceEngine,
):
    long_input = list(range(1000, 1100))  # six full pages of 16 (cached), and four tokens
    [first] = embed_events(last, [long_input], "cold")
    [again] = embed_events(last, [long_input], "warm")
    assert (first.usage.cached_tokens, again.usage.cached_tokens) == (0, 96)
    assert (again.embedding - first.embedding).abs().max().item() < 1e-5
    assert last.get_stats()["kv_pages_in_use"] == 0


def test_embeddings_and_a_generation_share_forwards_and_change_nothing_of_each_other(
    last: InferenceEngine,
):
    greedy = {"temperature": 0, "max_tokens": 24, "ignore_eos": True}
    alone_text = last.generate("Once upon a time", chat=False, **greedy)
    alone = last.embed(INPUTS)
    texts: list[str] = []
    thread = threading.Thread(
        target=lambda: texts.append(last.generate("Once upon a time", chat=False, **greedy))
    )
    thread.start()
    together = last.embed(INPUTS * 3)
    thread.join(60)
    assert texts == [alone_text]
    for i, vector in enumerate(together):
        assert (vector - alone[i % len(INPUTS)]).abs().max().item() < 1e-5


def test_what_the_model_cannot_embed_is_refused_with_nothing_queued(last: InferenceEngine):
    context = last.max_model_len
    refusals = {
        "input": [[[5] * (context + 1)], [""], []],
        "dimensions": [[[5]]],
    }
    for param, cases in refusals.items():
        for inputs in cases:
            settings = EmbedSettings(65) if param == "dimensions" else EmbedSettings()
            with pytest.raises(RequestError) as refused:
                last.submit_embeddings(inputs, print, "refused", settings)
            assert refused.value.param == param
    assert last.is_idle()


def test_a_chat_model_has_no_pooling_unless_served_with_one(tiny_model_dir: Path):
    with engine(tiny_model_dir) as chat, pytest.raises(RequestError) as refused:
        chat.embed(["hello"])
    assert refused.value.param == "model"
    assert "has no pooling (its folder has no sentence-transformers modules.json)" in str(
        refused.value
    )
    with engine(tiny_model_dir, pooling="mean") as pooled:
        [vector] = pooled.embed(["hello"])
    assert vector.shape == (64,) and vector.norm().item() == pytest.approx(1.0, abs=1e-6)


def test_a_gguf_stating_last_token_pooling_embeds_in_its_own_codes(
    tmp_path: Path, shared_cache: Path
):
    hf = hf_model("qwen3", tie_word_embeddings=True)
    gguf = write_gguf(hf, tmp_path / "embed.F32.gguf", pooling_type=3)  # ggml's LAST
    inputs = [random_tokens(5, seed=1), random_tokens(40, seed=2)]
    with engine(gguf) as running:
        assert running.quantization == "gguf"
        assert running.embeddings.pooling == ModelPooling(Pooling.LAST, True, "qwen3.pooling_type")
        vectors = running.embed(inputs)
    for tokens, vector in zip(inputs, vectors, strict=True):
        expected = reference_embedding(hf.model, tokens, "last")
        assert (vector - expected).abs().max().item() < TOL
