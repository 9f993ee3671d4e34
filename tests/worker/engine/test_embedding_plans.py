"""Embeddings in the scheduler, without a model: prefill-only plans that keep the rows their
pooling needs, the exact vector those rows make, pages given back at the end, and the
prefix cache shared where the pooling allows it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from common.embedding import EmbedSettings
from common.token_output import FinishReason
from tests.worker.engine.plan_bench import HIDDEN, ids, plan_bench, position_row
from worker.engine.embedding_requests import EmbeddingRequests
from worker.engine.sequence import RequestStatus
from worker.engine.step_plan import Chunk, HiddenRows
from worker.errors import ContextLengthExceeded, RequestError
from worker.model.pooling import ModelPooling, Pooling

INPUT_20 = list(range(1000, 1020))  # 5 pages of 4


def mean_row(positions: range) -> torch.Tensor:
    return torch.tensor([position_row(p) for p in positions]).mean(0)


def test_a_mean_embedding_keeps_every_row_of_each_chunk_and_ends_after_its_prefill(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, budget=8)
    [seq] = bench.embed([INPUT_20], "e", Pooling.MEAN)
    for start, end in ((0, 8), (8, 16)):
        plan = bench.step()
        assert plan.chunks == (
            Chunk(0, start, INPUT_20[start:end], False, False, HiddenRows.ALL, prompt=True),
        )
        assert plan.samples == () and bench.events == []
    assert bench.cache.stats().pages_in_use == 5
    plan = bench.step()
    assert plan.chunks == (Chunk(0, 16, INPUT_20[16:], False, False, HiddenRows.ALL, prompt=True),)
    [event] = bench.events
    assert (event.finish_reason, event.token_ids, event.text) == (FinishReason.STOP, (), "")
    assert event.embedding is not None and torch.equal(event.embedding, mean_row(range(20)))
    assert (event.usage.prompt_tokens, event.usage.completion_tokens) == (20, 0)
    assert seq.status is RequestStatus.FINISHED and bench.cache.stats().pages_in_use == 0
    counters = bench.scheduler.counters
    assert (counters.embeddings, counters.prefill_tokens, counters.total_tokens) == (1, 20, 0)
    bench.schedule()
    assert not bench.scheduler.has_work


def test_a_last_token_embedding_keeps_one_row_and_shares_the_prefix_cache(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, budget=8)
    bench.embed([INPUT_20], "first", Pooling.LAST, normalize=True)
    assert [bench.step().chunks[0].hidden for _ in range(3)] == [
        HiddenRows.NONE,
        HiddenRows.NONE,
        HiddenRows.LAST,
    ]
    # The same input again: every token but the last is a cache hit (four pages, and three
    # rows of the fifth), and the last one's row is computed.
    [again] = bench.embed([INPUT_20], "again", Pooling.LAST, normalize=True)
    plan = bench.step()
    assert plan.chunks == (Chunk(1, 19, INPUT_20[19:], False, False, HiddenRows.LAST, prompt=True),)
    assert again.num_cached_tokens == 19
    expected = F.normalize(torch.tensor(position_row(19)), dim=0)
    assert [torch.equal(e.embedding, expected) for e in bench.events] == [True, True]
    assert bench.events[1].usage.cached_tokens == 19


def test_a_cls_embedding_keeps_the_first_row_and_computes_every_token_each_time(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, budget=8)
    bench.embed([INPUT_20], "first", Pooling.CLS)
    hidden = [bench.step().chunks[0].hidden for _ in range(3)]
    assert hidden == [HiddenRows.FIRST, HiddenRows.NONE, HiddenRows.NONE]
    [again] = bench.embed([INPUT_20], "again", Pooling.CLS)
    assert bench.step().chunks == (
        Chunk(1, 0, INPUT_20[:8], False, False, HiddenRows.FIRST, prompt=True),
    )
    assert again.num_cached_tokens == 0  # its first row is not in the cache: computed anew
    bench.step(), bench.step()
    assert [e.embedding.tolist() for e in bench.events] == [position_row(0)] * 2


def test_dimensions_keep_the_first_components_scaled_to_unit_length(default_model_dir: Path):
    bench = plan_bench(default_model_dir)
    bench.embed([INPUT_20, [5, 6]], "cut", Pooling.MEAN, dimensions=2)
    plan = bench.step()
    assert len(plan.chunks) == 2 and plan.samples == ()
    vectors = [e.embedding for e in sorted(bench.events, key=lambda e: e.index)]
    assert torch.equal(vectors[0], F.normalize(mean_row(range(20))[:2], dim=0))
    assert torch.equal(vectors[1], F.normalize(mean_row(range(2))[:2], dim=0))


def test_a_preempted_mean_embedding_recomputes_its_input_without_counting_a_row_twice(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, num_pages=6, budget=8)
    [chat] = bench.submit([10, 11, 12, 13, 14, 15, 16], "chat", max_tokens=3)  # two pages
    [embedding] = bench.embed([list(range(2000, 2016))], "embed", Pooling.MEAN)  # four pages
    plan = bench.step(300)  # every page in use; the embedding's first row rides along
    assert plan.chunks[1] == Chunk(1, 0, [2000], False, False, HiddenRows.ALL, prompt=True)
    assert bench.step(301).chunks[0] == Chunk(
        1, 1, list(range(2001, 2009)), False, False, ALL, prompt=True
    )
    # The chat's ninth token needs a third page: the newest sequence gives its pages back.
    plan = bench.step(302)
    assert ids(plan.preempted) == [1] and embedding.status is RequestStatus.PREEMPTED
    assert chat.finish_reason is FinishReason.LENGTH
    # Readmitted once the chat's pages are free, it computes its input from token 0 again.
    for start in (0, 8):
        assert bench.step().chunks[0].start == start
    [end] = [e for e in bench.events if e.request_id == "embed"]
    assert torch.equal(end.embedding, mean_row(range(16)))
    assert bench.cache.stats().pages_in_use == 0


def test_an_aborted_embedding_ends_without_a_vector_and_frees_its_pages(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, budget=8)
    bench.embed([INPUT_20], "gone", Pooling.MEAN)
    bench.step()
    bench.aborts.add("gone")
    [event] = bench.update(bench.schedule())
    assert (event.finish_reason, event.embedding) == (FinishReason.ABORT, None)
    assert bench.cache.stats().pages_in_use == 0


ALL = HiddenRows.ALL


def intake(default_model_dir: Path, pooling: Pooling | None) -> EmbeddingRequests:
    requests = plan_bench(default_model_dir).requests  # a context of 256 tokens
    why = "its folder has no sentence-transformers modules.json"
    return EmbeddingRequests(requests, ModelPooling(pooling, reason=why), HIDDEN, "tiny")


@pytest.mark.parametrize(
    ("inputs", "settings", "param", "message"),
    [
        (
            [[5]],
            EmbedSettings(0),
            "dimensions",
            "dimensions must be in [1, 4] for this model, got 0",
        ),
        (
            [[5]],
            EmbedSettings(5),
            "dimensions",
            "dimensions must be in [1, 4] for this model, got 5",
        ),
        ([], EmbedSettings(), "input", "input must not be empty"),
        ([[5], []], EmbedSettings(), "input", "input[1] must not be empty"),
        (["hi", ""], EmbedSettings(), "input", "input[1] must not be empty"),
        (
            [[5, 49152]],
            EmbedSettings(),
            "input",
            "input[0]: token id 49152 is outside the vocabulary (0..49151)",
        ),
        (
            [[5] * 257],
            EmbedSettings(),
            "input",
            "input[0] is too long: 257 tokens > 256, the context",
        ),
    ],
)
def test_inputs_and_settings_a_model_cannot_take_are_refused_by_name(
    default_model_dir: Path, inputs, settings, param, message
):
    with pytest.raises(RequestError) as refused:
        intake(default_model_dir, Pooling.LAST).build("r", inputs, settings, print)
    assert (refused.value.param, str(refused.value)) == (param, message)
    if "too long" in message:
        assert isinstance(refused.value, ContextLengthExceeded)


def test_a_model_without_pooling_is_refused_naming_the_option_that_gives_it_one(
    default_model_dir: Path,
):
    with pytest.raises(RequestError) as refused:
        intake(default_model_dir, None).build("r", [[5] * 300], EmbedSettings(), print)
    assert refused.value.param == "model"
    assert str(refused.value) == (
        "model 'tiny' has no pooling (its folder has no sentence-transformers modules.json); "
        "serve it with --pooling last|mean|cls"
    )


def test_an_input_of_the_whole_context_is_embedded(default_model_dir: Path):
    [seq] = intake(default_model_dir, Pooling.LAST).build("r", [[5] * 256], EmbedSettings(), print)
    assert (seq.num_prompt_tokens, seq.max_total_tokens) == (256, 256)
