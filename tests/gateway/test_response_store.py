"""ResponseStore: what it keeps, the exact eviction order under both bounds, and its errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import ErrorKind, GatewayError
from gateway.response_store import ResponseStore

TURN = [{"role": "user", "content": "hi"}]


def response(response_id: str, text: str = "") -> dict[str, Any]:
    return {"id": response_id, "object": "response", "output": [], "note": text}


def size(response_id: str, text: str = "") -> int:
    return len(json.dumps(response(response_id, text))) + len(json.dumps(TURN))


def test_the_least_recently_used_goes_first_past_the_count():
    store = ResponseStore(max_entries=2, max_bytes=1 << 20)
    store.put(response("a"), TURN)
    store.put(response("b"), TURN)
    store.conversation("a")  # a continued: b is now the oldest use
    store.put(response("c"), TURN)
    assert store.ids() == ["a", "c"]
    assert store.num_bytes == size("a") + size("c")


def test_bytes_bound_evicts_until_it_holds():
    one = size("a")
    store = ResponseStore(max_entries=10, max_bytes=2 * one)
    store.put(response("a"), TURN)
    store.put(response("b"), TURN)
    store.put(response("c"), TURN)
    assert store.ids() == ["b", "c"]
    store.put(response("d", "x" * one), TURN)  # bigger: both others must go
    assert store.ids() == ["d"]
    assert store.num_bytes == size("d", "x" * one)


def test_a_response_larger_than_the_store_is_not_kept():
    store = ResponseStore(max_entries=10, max_bytes=10)
    store.put(response("a"), TURN)
    assert len(store) == 0 and store.num_bytes == 0


def test_zero_entries_stores_nothing():
    store = ResponseStore(max_entries=0, max_bytes=1 << 20)
    store.put(response("a"), TURN)
    assert len(store) == 0


def test_conversation_is_a_copy():
    store = ResponseStore(4, 1 << 20)
    store.put(response("a"), TURN)
    store.conversation("a")[0]["content"] = "changed"
    assert store.conversation("a") == TURN


def test_delete_frees_its_bytes():
    store = ResponseStore(4, 1 << 20)
    store.put(response("a"), TURN)
    assert store.delete("a") and not store.delete("a")
    assert (len(store), store.num_bytes) == (0, 0)


def test_missing_ids_are_a_404_or_a_400_naming_previous_response_id():
    store = ResponseStore(4, 1 << 20)
    with pytest.raises(GatewayError) as missing:
        store.get("nope")
    assert (missing.value.kind, missing.value.param) == (ErrorKind.NOT_FOUND, None)
    with pytest.raises(GatewayError) as previous:
        store.conversation("nope")
    assert (previous.value.kind, previous.value.param, previous.value.code) == (
        ErrorKind.INVALID_REQUEST,
        "previous_response_id",
        "previous_response_not_found",
    )


def test_negative_bounds_are_refused():
    with pytest.raises(ValueError, match="must be >= 0"):
        ResponseStore(-1, 10)
