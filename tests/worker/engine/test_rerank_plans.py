"""Reranks in the scheduler, without a model: one prefill-only sequence per document, the
query's tokens computed once for all of them, each ending with its head's exact score and
its pages given back; and every refusal of the intake, by name."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from common.rerank import RerankSettings
from common.token_output import FinishReason
from tests.worker.engine.plan_bench import PlanBench, plan_bench, position_row
from worker.engine.rerank_requests import RerankRequests
from worker.engine.step_plan import Chunk, HiddenRows
from worker.errors import ContextLengthExceeded, RequestError
from worker.model.pooling import ModelPooling, Pooling
from worker.model.score_head import ScoreHead
from worker.text.rerank_prompt import RerankPrompt

# Logits (position_row[1], position_row[0] / 10) = (1, p / 10): the score is sigmoid(p/10 - 1).
HEAD = ScoreHead(torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0]]), 1, "test")
PROMPT = RerankPrompt("Query: {query}\nDocument: {document}\nRelevant:", "test")
QUERY = "Where is Paris, the capital city of France?"
LAST = HiddenRows.LAST


def intake(bench: PlanBench, pooling: Pooling | None = Pooling.RANK) -> RerankRequests:
    ranking = ModelPooling(pooling, False, "its files")
    return RerankRequests(bench.requests, ranking, HEAD, PROMPT, "ranker")


def test_documents_of_one_query_compute_it_once_and_end_with_their_heads_score(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir, budget=64)  # pages of 4 tokens
    documents = ["Paris is in France.", "Berlin"]
    seqs = intake(bench).build("r", documents, RerankSettings(QUERY), bench.events.append)
    bench.arrived.append(seqs)
    first, second = (s.token_ids for s in seqs)
    assert (len(first), len(second), first[:15] == second[:15], first[15] != second[15]) == (
        24,
        20,
        True,
        True,
    )
    # The second document reads the query's 15 tokens (three pages, and three rows of the
    # fourth) from the first one's pages in the same forward, and computes only its own.
    plan = bench.step()
    assert plan.chunks == (
        Chunk(0, 0, first, False, False, LAST, prompt=True),
        Chunk(1, 15, second[15:], False, False, LAST, prompt=True),
    )
    assert plan.samples == ()
    ends = sorted(bench.events, key=lambda e: e.index)
    assert [(e.finish_reason, e.embedding, e.token_ids) for e in ends] == [
        (FinishReason.STOP, None, ())
    ] * 2
    for end, last in zip(ends, (23, 19), strict=True):
        assert end.score == pytest.approx(1 / (1 + math.exp(1 - position_row(last)[0] / 10)))
    assert [(e.usage.prompt_tokens, e.usage.cached_tokens) for e in ends] == [(24, 0), (20, 15)]
    counters = bench.scheduler.counters
    assert (counters.rerank_documents, counters.embeddings, counters.prefill_tokens) == (2, 0, 29)
    assert bench.cache.stats().pages_in_use == 0


def test_the_query_and_instruction_lead_and_the_document_keeps_its_leading_space(
    default_model_dir: Path,
):
    bench = plan_bench(default_model_dir)
    requests = intake(bench)
    [ids] = requests.token_ids(["Paris"], RerankSettings("q", max_tokens_per_doc=None))
    tokenizer = bench.requests.tokenizer
    assert ids == tokenizer.encode("Query: q\nDocument: Paris\nRelevant:")
    [cut] = requests.token_ids(["Paris is big"], RerankSettings("q", max_tokens_per_doc=1))
    assert cut == ids


@pytest.mark.parametrize(
    ("documents", "settings", "param", "message"),
    [
        ([], RerankSettings("q"), "documents", "documents must not be empty"),
        (["a"], RerankSettings(""), "query", "query must not be empty"),
        (
            ["a"],
            RerankSettings("q", "find"),
            "instruction",
            "this model's rerank template (test) takes no instruction",
        ),
        (
            ["a"],
            RerankSettings("q", max_tokens_per_doc=0),
            "max_tokens_per_doc",
            "max_tokens_per_doc must be >= 1, got 0",
        ),
        (
            ["a", "\ud800"],
            RerankSettings("q"),
            "documents",
            "documents must be valid Unicode text: it holds a lone surrogate",
        ),
        (
            ["a", "word " * 256],
            RerankSettings("q"),
            "documents",
            "documents[1] is too long: 267 tokens with the query > 256, the context",
        ),
        (
            ["a"],
            RerankSettings("word " * 256),
            "query",
            "query is too long: 266 tokens with the template >= 256, the context",
        ),
    ],
)
def test_queries_documents_and_settings_a_model_cannot_take_are_refused_by_name(
    default_model_dir: Path, documents, settings, param, message
):
    with pytest.raises(RequestError) as refused:
        intake(plan_bench(default_model_dir)).build("r", documents, settings, print)
    assert (refused.value.param, str(refused.value)) == (param, message)
    assert isinstance(refused.value, ContextLengthExceeded) == ("too long" in message)


@pytest.mark.parametrize("pooling", [None, Pooling.LAST])
def test_a_model_that_is_no_reranker_is_refused_naming_the_option_that_makes_one(
    default_model_dir: Path, pooling: Pooling | None
):
    with pytest.raises(RequestError) as refused:
        intake(plan_bench(default_model_dir), pooling).build("r", ["a"], RerankSettings("q"), print)
    assert refused.value.param == "model"
    assert str(refused.value) == (
        "model 'ranker' is not a reranker (its files); serve a reranker, or this model with "
        "--pooling rank"
    )
