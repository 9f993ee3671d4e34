"""`truncation: "auto"` on /v1/responses through `astrai serve`: a conversation longer than the
context loses its oldest turns and is answered; `disabled` (the default) is a 400."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import TINY_NAME
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow
# Three long user turns and two answers: ~1,500 tokens against the tiny model's 1,024.
LONG = [
    {"role": "user", "content": "word " * 500},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "more " * 500},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "last " * 500},
]


def test_auto_drops_the_oldest_turns_until_the_input_fits(tiny_server: Server):
    body = {"model": TINY_NAME, "input": LONG, "max_output_tokens": 4, "temperature": 0}
    refused = httpx.post(f"{tiny_server.url}/v1/responses", json=body, timeout=120)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    answered = httpx.post(
        f"{tiny_server.url}/v1/responses", json={**body, "truncation": "auto"}, timeout=120
    )
    assert answered.status_code == 200, answered.text
    response = answered.json()
    assert response["truncation"] == "auto"
    kept = response["usage"]["input_tokens"]
    alone = httpx.post(
        f"{tiny_server.url}/tokenize", json={"messages": [LONG[-1]]}, timeout=60
    ).json()["count"]
    assert kept == alone  # only the last user turn fits beside the answer's 4 tokens
