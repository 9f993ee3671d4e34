"""/v1/embeddings through `astrai serve`: real processes, real HTTP, the official openai SDK.

The model is a tiny random Qwen3 in a sentence-transformers folder (tests/worker/
embedding_model.py: last-token pooling, normalized, as Qwen3-Embedding); the served vectors
are the in-process engine's, in floats and in base64, and what the model cannot embed is
OpenAI's 400."""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.harness import Server, http_json
from tests.worker.embedding_model import build_embedding_model
from worker.engine.inference_engine import InferenceEngine

pytestmark = pytest.mark.slow
MODEL = "qwen3-embed"
OPTIONS = ("--dtype", "float32", "--kv-cache-mb", "16", "--prefill-token-budget", "16")
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Hello", "A longer sentence " * 8]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Path:
    return build_embedding_model(tmp_path_factory.mktemp("embed") / MODEL, default_model_dir)


@pytest.fixture(scope="module")
def server(folder: Path) -> Iterator[Server]:
    running = Server("serve", "--model", str(folder), *OPTIONS)
    try:
        yield running.wait_ready()
    finally:
        running.stop()
        assert not running.group_alive(), "astrai serve left processes behind"


@pytest.fixture(scope="module")
def expected(folder: Path) -> dict[str, list[float] | int]:
    """Each text's vector and token count from the engine in this process (the unit path)."""
    budgets = {"prefill_token_budget": 16, "idle_prefill_token_budget": 16}
    with InferenceEngine(folder, dtype="float32", kv_cache_mb=16, **budgets) as e:
        vectors = e.embed([*TEXTS, [5, 6, 7]])
        counts = {t: len(e.requests.prompt_token_ids(t, chat=False)) for t in TEXTS}
    return {
        **{text: v.tolist() for text, v in zip(TEXTS, vectors, strict=False)},
        **{f"tokens:{text}": count for text, count in counts.items()},
        "ids": vectors[-1].tolist(),
    }


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def assert_close(got: list[float], want: list[float]) -> None:
    assert len(got) == len(want) == 64
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-5
    assert sum(a * a for a in got) == pytest.approx(1.0, abs=1e-5)


def test_the_sdk_gets_the_engines_vectors_in_base64_and_in_floats(server: Server, expected: dict):
    sdk = client(server)
    # Without encoding_format the SDK asks for base64 and decodes it into floats itself.
    one = sdk.embeddings.create(model=MODEL, input=TEXTS[0])
    assert (one.object, one.model, [d.index for d in one.data]) == ("list", MODEL, [0])
    assert_close(one.data[0].embedding, expected[TEXTS[0]])
    assert one.usage.prompt_tokens == one.usage.total_tokens == expected[f"tokens:{TEXTS[0]}"]
    many = sdk.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    assert [d.index for d in many.data] == [0, 1, 2]
    for text, item in zip(TEXTS, many.data, strict=True):
        assert item.object == "embedding"
        assert_close(item.embedding, expected[text])
    assert many.usage.prompt_tokens == sum(expected[f"tokens:{t}"] for t in TEXTS)
    # Asked for by name, base64 comes back as the text: float32 little-endian bytes.
    ids = sdk.embeddings.create(model=MODEL, input=[[5, 6, 7]], encoding_format="base64")
    encoded = ids.data[0].embedding
    assert isinstance(encoded, str)
    assert_close(list(struct.unpack("<64f", base64.b64decode(encoded))), expected["ids"])
    assert ids.usage.prompt_tokens == 3


def test_dimensions_cut_the_vector_and_scale_it_to_unit_length(server: Server, expected: dict):
    cut = client(server).embeddings.create(model=MODEL, input=TEXTS[0], dimensions=8)
    vector = cut.data[0].embedding
    head = expected[TEXTS[0]][:8]
    norm = sum(v * v for v in head) ** 0.5
    assert len(vector) == 8
    assert max(abs(a - b / norm) for a, b in zip(vector, head, strict=True)) < 1e-5


def refusal(server: Server, **body: object) -> dict:
    with pytest.raises(openai.BadRequestError) as refused:
        client(server).embeddings.create(**{"model": MODEL, **body})  # type: ignore[arg-type]
    return refused.value.body  # the error object: message, type, param, code


@pytest.mark.parametrize(
    ("body", "param", "start"),
    [
        ({"input": ""}, "input", "input must not be empty"),
        ({"input": []}, "input", "input must not be empty"),
        ({"input": [[5] * 300]}, "input", "input[0] is too long: 300 tokens > 256"),
        ({"input": "hi", "dimensions": 65}, "dimensions", "dimensions must be in [1, 64]"),
    ],
)
def test_what_the_model_cannot_embed_is_a_400_naming_the_parameter(
    server: Server, body: dict, param: str, start: str
):
    error = refusal(server, **body)
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert error["message"].startswith(start)
    if "too long" in start:
        assert error["code"] == "context_length_exceeded"


def test_a_chat_model_served_without_pooling_refuses_naming_the_flag(tiny_server: Server):
    reply = httpx.post(f"{tiny_server.url}/v1/embeddings", json={"input": "hello"}, timeout=30)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["param"], error["type"]) == ("model", "invalid_request_error")
    assert error["message"] == (
        "model 'tiny-llama' has no pooling (its folder has no sentence-transformers "
        "modules.json); serve it with --pooling last|mean|cls"
    )


def test_embeddings_are_counted_and_leave_no_page_in_use(server: Server):
    client(server).embeddings.create(model=MODEL, input=["a", "b"])
    stats = server.stats()
    assert stats["total_embeddings"] >= 2
    assert stats["workers"][0]["kv_pages_in_use"] == 0
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert 'astrai_requests_total{protocol="embeddings",status="200"}' in metrics
    assert http_json(f"{server.url}/health")[0] == 200
