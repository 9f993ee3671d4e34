"""Request ids on every response; unknown routes and methods answer JSON errors."""

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import GatewayConfig


@pytest.fixture(scope="module")
def client() -> TestClient:
    # No lifespan: nothing binds the worker socket; the routes below need no worker.
    return TestClient(create_app(GatewayConfig(worker_bind="inproc://request-ids-test")))


def test_a_given_request_id_is_echoed(client: TestClient):
    response = client.get("/stats", headers={"X-Request-Id": "trace-42.a"})
    assert response.headers["x-request-id"] == "trace-42.a"
    assert "request-id" not in response.headers


def test_each_request_gets_a_fresh_id_otherwise(client: TestClient):
    first, second = client.get("/stats"), client.get("/stats")
    assert first.headers["x-request-id"].startswith("req_")
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


def test_a_header_unsafe_id_is_replaced(client: TestClient):
    response = client.get("/stats", headers={"X-Request-Id": "a" * 500})
    assert response.headers["x-request-id"].startswith("req_")


def test_anthropic_routes_also_carry_request_id(client: TestClient):
    response = client.post("/v1/messages", content=b"{}", headers={"X-Request-Id": "abc"})
    assert response.headers["request-id"] == response.headers["x-request-id"] == "abc"


def test_unknown_routes_are_json_404_in_the_protocols_shape(client: TestClient):
    response = client.get("/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "no route GET /v1/nothing-here"
    anthropic = client.get("/v1/messages/nothing")
    assert anthropic.status_code == 404
    assert anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "not_found_error"


def test_wrong_methods_are_json_405(client: TestClient):
    response = client.get("/v1/chat/completions")
    assert response.status_code == 405
    assert response.json()["error"]["message"] == "GET is not allowed on /v1/chat/completions"
    assert "POST" in response.headers["allow"]
