"""Every field of every request body × hostile values, over HTTP: never a 5xx, every refusal in
the route's protocol's shape, and nothing left open afterwards.

The fields come from the pydantic request models themselves (top level, and the first
message's or input item's), so a field added to a model is covered without touching this file.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from gateway.protocols.anthropic_body import Message as AnthropicMessage
from gateway.protocols.anthropic_body import MessagesBody
from gateway.protocols.chat_body import ChatBody
from gateway.protocols.chat_body import Message as ChatMessage
from gateway.protocols.completions_body import CompletionsBody
from gateway.protocols.embeddings_body import EmbeddingsBody
from gateway.protocols.rerank_body import RerankBody
from gateway.protocols.responses_body import InputItem, ResponsesBody
from gateway.protocols.tokenize_body import DetokenizeBody, TokenizeBody
from tests.conftest import TINY_NAME
from tests.e2e.harness import Server, wait_until

pytestmark = pytest.mark.slow

USER = {"role": "user", "content": "hi"}
CONCURRENT = 4  # requests in flight at once: the sweep's ~1,400 bodies in half the time
# (path, body model, a valid body, the model of its messages' (or input's) items or None,
# protocol); the items are the valid body's one array.
ROUTES: list[tuple[str, type[BaseModel], dict[str, Any], type[BaseModel] | None, str]] = [
    (
        "/v1/chat/completions",
        ChatBody,
        {"messages": [USER], "max_tokens": 1},
        ChatMessage,
        "openai",
    ),
    ("/v1/completions", CompletionsBody, {"prompt": "hi", "max_tokens": 1}, None, "openai"),
    (
        "/v1/responses",
        ResponsesBody,
        {"input": [USER], "max_output_tokens": 1},
        InputItem,
        "openai",
    ),
    (
        "/v1/messages",
        MessagesBody,
        {"model": TINY_NAME, "max_tokens": 1, "messages": [USER]},
        AnthropicMessage,
        "anthropic",
    ),
    (
        "/v1/messages/count_tokens",
        MessagesBody,
        {"model": TINY_NAME, "messages": [USER]},
        AnthropicMessage,
        "anthropic",
    ),
    ("/v1/embeddings", EmbeddingsBody, {"input": "hi"}, None, "openai"),
    ("/v1/rerank", RerankBody, {"query": "hi", "documents": ["a"]}, None, "openai"),
    ("/tokenize", TokenizeBody, {"prompt": "hi"}, None, "openai"),
    ("/detokenize", DetokenizeBody, {"tokens": [1, 2]}, None, "openai"),
]
# Wrong types, out of range, past 64 bits, not finite, lone surrogates, empty, oversized.
HOSTILE: list[Any] = [
    "x",
    12345,
    -1,
    2**64,
    -(2**64),
    1.5,
    float("nan"),
    float("inf"),
    True,
    None,
    "\ud800",
    "",
    [],
    {},
    ["\ud800"],
    {"a": "\ud800", "b": 2**64},
    "x" * 100_000,
    list(range(10_000)),
]


def json_names(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def mutations() -> list[tuple[str, str, bytes, str]]:
    """(route, field path, raw body, protocol) for every field × hostile value."""
    cases = []
    for path, model, valid, item_model, protocol in ROUTES:
        targets: list[tuple[str, ...]] = [(name,) for name in json_names(model)]
        if item_model is not None:
            items = next(key for key, value in valid.items() if isinstance(value, list))
            targets += [(items, "0", name) for name in json_names(item_model)]
        for target in targets:
            for value in HOSTILE:
                body = json.loads(json.dumps(valid))
                holder = body
                for key in target[:-1]:
                    holder = holder[int(key)] if key.isdigit() else holder[key]
                holder[target[-1]] = value
                raw = json.dumps(body, allow_nan=True).encode()  # NaN, lone \ud800 escapes
                cases.append((path, ".".join(target), raw, protocol))
    return cases


def assert_protocol_shape(response: httpx.Response, protocol: str) -> None:
    body = response.json()
    if protocol == "anthropic":
        assert body["type"] == "error" and isinstance(body["error"]["type"], str)
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    else:
        assert isinstance(body["error"]["type"], str)
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]


def test_no_body_gives_a_5xx_and_nothing_stays_open(tiny_server: Server):
    cases = mutations()
    assert len(cases) > 1000  # the models' fields were found
    statuses: dict[int, int] = {}
    # A null token budget is valid: the tiny model then writes to the end of its 1,024-token
    # context, 11-97 s on a busy 2-core CPU; the bound is only there so nothing hangs. (The
    # tiny model has no pooling: a valid embeddings or rerank body gets that 400.)
    with (
        httpx.Client(base_url=tiny_server.url, timeout=300) as client,
        ThreadPoolExecutor(CONCURRENT) as pool,
    ):

        def send(raw: bytes, path: str) -> httpx.Response:
            return client.post(path, content=raw, headers={"content-type": "application/json"})

        responses = pool.map(send, [raw for _, _, raw, _ in cases], [c[0] for c in cases])
        for (path, field, raw, protocol), response in zip(cases, responses, strict=True):
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            assert response.status_code < 500, (path, field, raw[:200], response.text[:300])
            if response.status_code >= 400:
                assert_protocol_shape(response, protocol)
    assert statuses.get(400, 0) > len(cases) // 2  # most of them are refused, by name

    def nothing_open() -> bool:
        stats = tiny_server.stats()
        pages = sum(w["kv_pages_in_use"] for w in stats["workers"])
        return (stats["open_requests"], stats["gateway"]["in_flight"], pages) == (0, 0, 0)

    assert wait_until(nothing_open, 15)
