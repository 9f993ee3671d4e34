"""/v1/embeddings in the gateway: the body's forms and every 400, the exact answer in floats
and in base64, and the route through the real app and a scripted worker."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest

from common.embedding import EmbedSettings, pack_vector
from common.errors import RejectCode
from common.schemas import Accepted, Finished, Message, Rejected, Submit
from common.token_output import FinishReason
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.base import ChatResult, ChoiceResult
from gateway.protocols.embeddings import EmbeddingsRequest, EmbeddingsResponseBuilder
from gateway.protocols.embeddings_body import MAX_INPUTS
from tests.gateway.in_process import in_process

BUILDER = EmbeddingsResponseBuilder()
VECTORS = [[0.6, 0.8], [1.0, 0.0], [0.0, -1.0]]


def parse(**fields: Any) -> EmbeddingsRequest:
    request = BUILDER.parse({"model": "embedder", "input": "hello", **fields})
    assert isinstance(request, EmbeddingsRequest)
    return request


def parse_error(**fields: Any) -> GatewayError:
    with pytest.raises(GatewayError) as caught:
        BUILDER.parse(fields)
    assert caught.value.kind == ErrorKind.INVALID_REQUEST
    return caught.value


@pytest.mark.parametrize(
    ("given", "inputs"),
    [
        ("hello", ["hello"]),
        (["a", "b c"], ["a", "b c"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1, 2], [3]], [[1, 2], [3]]),
        (["a", [3]], ["a", [3]]),
    ],
)
def test_input_is_text_or_token_ids_one_input_each(given: Any, inputs: list[Any]):
    request = parse(input=given)
    assert request.prompts == inputs and request.num_choices == len(inputs)
    submit = request.submit("embd-1")
    assert (submit.prompts, submit.embed, submit.messages) == (inputs, EmbedSettings(), None)


def test_dimensions_go_to_the_worker_and_the_encoding_stays_for_the_answer():
    request = parse(dimensions=32, encoding_format="base64", user="someone")
    assert request.submit("embd-1").embed == EmbedSettings(32)
    assert (request.encoding_format, request.stream) == ("base64", False)
    assert parse().encoding_format == "float"


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        ({}, "input", "input is required"),
        ({"input": None}, "input", "input is required"),
        ({"input": ""}, "input", "input must not be empty"),
        ({"input": []}, "input", "input must not be empty"),
        ({"input": ["a", ""]}, "input.1", "input.1 must not be empty"),
        ({"input": [[1], []]}, "input.1", "input.1 must not be empty"),
        (
            {"input": [1, -2]},
            "input.1",
            "input.1 must be a token id (an integer >= 0), got -2",
        ),
        (
            {"input": {"text": "a"}},
            "input",
            "input must be a string, an array of strings or an array of token ids, got object",
        ),
        (
            {"input": ["a"] * (MAX_INPUTS + 1)},
            "input",
            f"input may hold at most {MAX_INPUTS} inputs, got {MAX_INPUTS + 1}",
        ),
        (
            {"input": "a", "encoding_format": "int8"},
            "encoding_format",
            "encoding_format must be 'float' or 'base64', got \"int8\"",
        ),
        ({"input": "a", "dimensions": 0}, "dimensions", "dimensions must be >= 1, got 0"),
        (
            {"input": "a", "dimensions": "8"},
            "dimensions",
            "dimensions must be an integer, got string",
        ),
        ({"input": "a", "user": 7}, "user", "user must be a string, got integer"),
    ],
)
def test_bad_bodies_are_400s_naming_the_parameter(fields: dict[str, Any], param: str, message: str):
    error = parse_error(**fields)
    assert (error.param, error.message) == (param, message)


def result(request: EmbeddingsRequest, vectors: list[list[float]]) -> ChatResult:
    choices = [
        ChoiceResult(index=i, finish_reason=FinishReason.STOP, embedding=pack_vector(v))
        for i, v in enumerate(vectors)
    ]
    return ChatResult("embd-1", "embedder", 1700000000, choices[::-1], 9, request=request)


def test_the_answer_lists_each_inputs_vector_in_input_order_with_its_usage():
    body = BUILDER.format_response(result(parse(input=["a", "b", "c"]), VECTORS))
    assert body == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": list(struct.unpack("<2f", v))}
            for i, v in enumerate(pack_vector(vector) for vector in VECTORS)
        ],
        "model": "embedder",
        "usage": {"prompt_tokens": 9, "total_tokens": 9},
    }


def test_base64_is_the_vectors_float32_little_endian_bytes():
    body = BUILDER.format_response(result(parse(encoding_format="base64"), VECTORS[:1]))
    encoded = body["data"][0]["embedding"]
    assert base64.b64decode(encoded) == struct.pack("<2f", 0.6, 0.8)


def test_a_vector_missing_from_the_workers_answer_is_an_internal_error():
    broken = ChatResult("embd-1", "embedder", 1, [ChoiceResult(0, finish_reason=FinishReason.STOP)])
    with pytest.raises(GatewayError) as caught:
        BUILDER.format_response(broken)
    assert caught.value.kind is ErrorKind.INTERNAL


def embeds(submit: Submit) -> list[Message]:
    """A worker that embeds input i as VECTORS[i], cut to the dimensions asked, 3 tokens each."""
    rid, inputs = submit.request_id, submit.prompts or []
    assert submit.embed is not None
    cut = submit.embed.dimensions
    ends = [
        Finished(rid, i, FinishReason.STOP, 3, 0, 0, embedding=pack_vector(VECTORS[i][:cut]))
        for i in range(len(inputs))
    ]
    return [Accepted(rid, prompt_tokens=3 * len(inputs)), *ends[::-1]]  # in any order


def refuses(submit: Submit) -> list[Message]:
    message = "model 'scripted' has no pooling (none stated); serve it with --pooling last|mean|cls"
    return [Rejected(submit.request_id, RejectCode.INVALID_REQUEST, message, "model")]


async def test_the_route_embeds_through_a_worker_behind_the_api_key():
    async with in_process(embeds, api_key="sk-test") as run:
        headers = {"Authorization": "Bearer sk-test"}
        body = {"model": "scripted", "input": ["a", [5, 6]], "dimensions": 1}
        denied = await run.client.post("/v1/embeddings", json=body)
        assert (
            denied.status_code == 401 and denied.json()["error"]["type"] == "authentication_error"
        )
        reply = await run.client.post("/v1/embeddings", json=body, headers=headers)
        assert reply.status_code == 200
        assert reply.json()["data"] == [
            {"object": "embedding", "index": 0, "embedding": [pytest.approx(0.6)]},
            {"object": "embedding", "index": 1, "embedding": [1.0]},
        ]
        assert reply.json()["usage"] == {"prompt_tokens": 6, "total_tokens": 6}
        [submit] = run.worker.submits
        assert (submit.prompts, submit.embed) == (["a", [5, 6]], EmbedSettings(1))
        assert run.counted("embeddings", 200) == 1 and run.counted("embeddings", 401) == 1
        await run.assert_all_released()


async def test_a_workers_refusal_is_openais_400_naming_the_parameter():
    async with in_process(refuses) as run:
        reply = await run.client.post("/v1/embeddings", json={"input": "hello"})
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", "model")
        assert error["message"].startswith("model 'scripted' has no pooling")
        await run.assert_all_released()
