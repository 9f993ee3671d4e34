"""/v1/rerank in the gateway: the body's forms and every 400, the exact answer (ranked, cut
to top_n, with or without the documents), and both routes through the real app and a
scripted worker."""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import RejectCode
from common.rerank import RerankSettings
from common.schemas import Accepted, Finished, Message, Rejected, Submit
from common.token_output import FinishReason
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.base import ChatResult, ChoiceResult
from gateway.protocols.rerank import RerankRequest, RerankResponseBuilder
from gateway.protocols.rerank_body import MAX_DOCUMENTS
from tests.gateway.in_process import in_process

BUILDER = RerankResponseBuilder()
DOCUMENTS = ["Paris is in France.", "Berlin is in Germany.", "Paris, Texas."]
SCORES = [0.9, 0.1, 0.4]


def parse(**fields: Any) -> RerankRequest:
    request = BUILDER.parse(
        {"model": "ranker", "query": "Paris?", "documents": DOCUMENTS, **fields}
    )
    assert isinstance(request, RerankRequest)
    return request


def parse_error(**fields: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse(fields)
    assert caught.value.kind == ErrorKind.INVALID_REQUEST
    return caught.value


def test_the_documents_go_to_the_worker_as_prompts_with_the_query():
    request = parse(instruction="Find the city", max_tokens_per_doc=64)
    submit = request.submit("rerank-1")
    assert (submit.prompts, submit.messages, submit.embed) == (DOCUMENTS, None, None)
    assert submit.rerank == RerankSettings("Paris?", "Find the city", 64)
    assert (request.num_choices, request.stream, request.top_n) == (3, False, None)
    assert request.return_documents is True  # Jina's default
    assert request.routing_text.startswith("Paris?\nParis is in France.")
    assert parse().submit("r").rerank == RerankSettings("Paris?")


def test_documents_may_be_objects_with_a_text_as_jina_and_cohere_v1_send_them():
    given = [{"text": "a", "title": "ignored"}, "b", {"text": "", "image": None}]
    assert parse(documents=given).prompts == ["a", "b", ""]


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({"documents": ["a"]}, "query", "query is required"),
        ({"query": "", "documents": ["a"]}, "query", "query must not be empty"),
        ({"query": 5, "documents": ["a"]}, "query", "query must be a string, got integer"),
        ({"query": "q"}, "documents", "documents is required"),
        ({"query": "q", "documents": []}, "documents", "documents must not be empty"),
        (
            {"query": "q", "documents": "a"},
            "documents",
            "documents must be an array of strings, got string",
        ),
        (
            {"query": "q", "documents": ["a", 3]},
            "documents.1",
            "documents.1 must be a string or an object with a text, got integer",
        ),
        ({"query": "q", "documents": [{"title": "t"}]}, "documents.0.text", None),
        (
            {"query": "q", "documents": [{"text": "a", "image": "data:..."}]},
            "documents.0.image",
            "documents.0.image is an image: this server reranks text",
        ),
        (
            {"query": "q", "documents": ["a"] * (MAX_DOCUMENTS + 1)},
            "documents",
            f"documents may hold at most {MAX_DOCUMENTS} documents, got {MAX_DOCUMENTS + 1}",
        ),
        ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n", "top_n must be >= 1, got 0"),
        (
            {"query": "q", "documents": ["a"], "top_n": "2"},
            "top_n",
            "top_n must be an integer, got string",
        ),
        (
            {"query": "q", "documents": ["a"], "return_documents": "yes"},
            "return_documents",
            "return_documents must be a boolean, got string",
        ),
        (
            {"query": "q", "documents": ["a"], "max_tokens_per_doc": 0},
            "max_tokens_per_doc",
            "max_tokens_per_doc must be >= 1, got 0",
        ),
        (
            {"query": "q", "documents": ["a"], "rank_fields": ["title"]},
            "rank_fields",
            "rank_fields is not supported by this server",
        ),
    ],
)
def test_bad_bodies_are_400s_naming_the_parameter(
    fields: dict[str, Any], param: str, message: str | None
):
    error = parse_error(**fields)
    assert error.param == param
    assert error.message == (message or f"{param} is required")


def result(request: RerankRequest, scores: list[float | None]) -> ChatResult:
    choices = [
        ChoiceResult(index=i, finish_reason=FinishReason.STOP, score=s)
        for i, s in enumerate(scores)
    ]
    return ChatResult("rerank-1", "ranker", 1700000000, choices[::-1], 27, request=request)


def test_the_answer_ranks_every_document_highest_first_with_its_text_and_usage():
    body = BUILDER.format_response(result(parse(), SCORES))
    assert body == {
        "id": "rerank-1",
        "model": "ranker",
        "results": [
            {"index": 0, "relevance_score": 0.9, "document": {"text": DOCUMENTS[0]}},
            {"index": 2, "relevance_score": 0.4, "document": {"text": DOCUMENTS[2]}},
            {"index": 1, "relevance_score": 0.1, "document": {"text": DOCUMENTS[1]}},
        ],
        "usage": {"prompt_tokens": 27, "total_tokens": 27},
    }


def test_top_n_keeps_the_best_and_ties_keep_the_documents_order():
    body = BUILDER.format_response(result(parse(top_n=2, return_documents=False), [0.5, 0.7, 0.5]))
    assert body["results"] == [
        {"index": 1, "relevance_score": 0.7},
        {"index": 0, "relevance_score": 0.5},
    ]
    everything = BUILDER.format_response(result(parse(top_n=50), SCORES))["results"]
    assert [r["index"] for r in everything] == [0, 2, 1]


def test_a_score_missing_from_the_workers_answer_is_an_internal_error():
    with pytest.raises(GatewayError) as caught:
        BUILDER.format_response(result(parse(), [0.9, None, 0.4]))
    assert caught.value.kind is ErrorKind.INTERNAL


def ranks(submit: Submit) -> list[Message]:
    """A worker that scores document i as SCORES[i], 5 tokens each, ending in any order."""
    rid, documents = submit.request_id, submit.prompts or []
    assert submit.rerank is not None and submit.embed is None
    ends = [
        Finished(rid, i, FinishReason.STOP, 5, 0, 0, score=SCORES[i]) for i in range(len(documents))
    ]
    return [Accepted(rid, prompt_tokens=5 * len(documents)), *ends[::-1]]


def refuses(submit: Submit) -> list[Message]:
    message = "model 'scripted' is not a reranker (none stated); serve a reranker, or ..."
    return [Rejected(submit.request_id, RejectCode.INVALID_REQUEST, message, "model")]


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank"])
async def test_both_routes_rerank_through_a_worker_behind_the_api_key(path: str):
    async with in_process(ranks, api_key="sk-test") as run:
        headers = {"Authorization": "Bearer sk-test"}
        body = {"model": "scripted", "query": "Paris?", "documents": DOCUMENTS, "top_n": 2}
        denied = await run.client.post(path, json=body)
        assert denied.status_code == 401
        assert denied.json()["error"]["type"] == "authentication_error"
        reply = await run.client.post(path, json=body, headers=headers)
        assert reply.status_code == 200
        answer = reply.json()
        assert answer["id"].startswith("rerank-") and answer["model"] == "scripted"
        assert answer["results"] == [
            {"index": 0, "relevance_score": 0.9, "document": {"text": DOCUMENTS[0]}},
            {"index": 2, "relevance_score": 0.4, "document": {"text": DOCUMENTS[2]}},
        ]
        assert answer["usage"] == {"prompt_tokens": 15, "total_tokens": 15}
        [submit] = run.worker.submits
        assert (submit.prompts, submit.rerank) == (DOCUMENTS, RerankSettings("Paris?"))
        assert run.counted("rerank", 200) == 1 and run.counted("rerank", 401) == 1
        await run.assert_all_released()


async def test_a_workers_refusal_is_openais_400_naming_the_parameter():
    async with in_process(refuses) as run:
        reply = await run.client.post("/v1/rerank", json={"query": "q", "documents": ["a"]})
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", "model")
        assert error["message"].startswith("model 'scripted' is not a reranker")
        await run.assert_all_released()
