"""/v1/rerank and /rerank through `astrai serve`: real processes, real HTTP.

The model is a tiny random Qwen3-Reranker (tests/worker/rerank_model.py: a causal LM scored by
its yes/no logits, known by its README); the served scores are the in-process engine's, ranked
in Jina's and Cohere's shape, and what the model cannot rerank is a 400 in OpenAI's shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.rerank import RerankSettings
from tests.e2e.harness import Server, http_json
from tests.worker.rerank_model import build_reranker
from worker.engine.inference_engine import InferenceEngine

pytestmark = pytest.mark.slow
MODEL = "qwen3-rerank"
OPTIONS = ("--dtype", "float32", "--kv-cache-mb", "16", "--prefill-token-budget", "16")
QUERY = "What is the capital of France?"
DOCUMENTS = ["Paris is the capital of France.", "Berlin", "The Eiffel tower is in Paris."]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Path:
    return build_reranker(tmp_path_factory.mktemp("rerank") / MODEL, default_model_dir)


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[Server]:
    running = Server("serve", "--model", str(folder), *OPTIONS)
    try:
        yield running.wait_ready()
    finally:
        running.stop()
        assert not running.group_alive(), "astrai serve left processes behind"


@pytest.fixture(scope="module")
def expected(folder: Path) -> tuple[list[float], int]:
    """Each document's score and all their prompt tokens from the engine in this process."""
    budgets = {"prefill_token_budget": 16, "idle_prefill_token_budget": 16}
    with InferenceEngine(folder, dtype="float32", kv_cache_mb=16, **budgets) as e:
        scores = e.rerank(QUERY, DOCUMENTS)
        tokens = sum(map(len, e.reranks.token_ids(DOCUMENTS, RerankSettings(QUERY))))
    return scores, tokens


def rerank(server: Server, path: str = "/v1/rerank", **body: Any) -> httpx.Response:
    body = {"model": MODEL, "query": QUERY, "documents": DOCUMENTS, **body}
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def test_the_engines_scores_come_back_ranked_with_the_documents_and_usage(
    server: Server, expected: tuple[list[float], int]
):
    scores, tokens = expected
    reply = rerank(server)
    assert reply.status_code == 200
    answer = reply.json()
    assert answer["id"].startswith("rerank-") and answer["model"] == MODEL
    order = sorted(range(len(DOCUMENTS)), key=lambda i: -scores[i])
    assert [r["index"] for r in answer["results"]] == order
    for result in answer["results"]:
        i = result["index"]
        assert result["relevance_score"] == pytest.approx(scores[i], abs=1e-5)
        assert result["document"] == {"text": DOCUMENTS[i]}
    assert answer["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_rerank_is_the_same_route_and_top_n_and_return_documents_shape_the_answer(
    server: Server, expected: tuple[list[float], int]
):
    scores, _ = expected
    objects = [{"text": d} for d in DOCUMENTS]
    reply = rerank(server, "/rerank", documents=objects, top_n=1, return_documents=False)
    assert reply.status_code == 200
    [best] = reply.json()["results"]
    assert set(best) == {"index", "relevance_score"}
    assert best["relevance_score"] == pytest.approx(max(scores), abs=1e-5)


@pytest.mark.parametrize(
    ("body", "param", "start"),
    [
        ({"documents": []}, "documents", "documents must not be empty"),
        ({"query": ""}, "query", "query must not be empty"),
        ({"top_n": 0}, "top_n", "top_n must be >= 1"),
        ({"documents": ["word " * 300]}, "documents", "documents[0] is too long: "),
    ],
)
def test_what_the_model_cannot_rerank_is_a_400_naming_the_parameter(
    server: Server, body: dict[str, Any], param: str, start: str
):
    reply = rerank(server, **body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert error["message"].startswith(start)
    if "too long" in start:
        assert error["code"] == "context_length_exceeded"
        assert error["message"].endswith("tokens with the query > 256, the context")


def test_a_chat_model_refuses_naming_the_model_and_the_flag(tiny_server: Server):
    body = {"query": "q", "documents": ["a"]}
    reply = httpx.post(f"{tiny_server.url}/v1/rerank", json=body, timeout=30)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["param"], error["type"]) == ("model", "invalid_request_error")
    assert error["message"] == (
        "model 'tiny-llama' is not a reranker (its folder has no sentence-transformers "
        "modules.json); serve a reranker, or this model with --pooling rank"
    )


def test_reranks_are_counted_and_leave_no_page_in_use(server: Server):
    assert rerank(server).status_code == 200
    stats = server.stats()
    assert stats["total_rerank_documents"] >= len(DOCUMENTS)
    assert stats["workers"][0]["kv_pages_in_use"] == 0
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert 'astrai_requests_total{protocol="rerank",status="200"}' in metrics
    assert http_json(f"{server.url}/health")[0] == 200
