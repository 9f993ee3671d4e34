"""CORS: off by default; for configured origins, preflights answered before auth and routing."""

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import GatewayConfig

ALLOWED = "http://localhost:3000"
API_HEADERS = "authorization, content-type, x-api-key, anthropic-version, x-request-id"


def make_client(*origins: str) -> TestClient:
    # No lifespan: nothing binds the worker socket; preflights and /stats need no worker.
    config = GatewayConfig(worker_bind="inproc://cors-test", api_key="secret", cors_origins=origins)
    return TestClient(create_app(config))


def preflight(client: TestClient, path: str, origin: str):
    return client.options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": API_HEADERS,
        },
    )


def cors_headers(response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.startswith("access-control-")}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/messages"])
def test_preflight_from_an_allowed_origin_passes_without_the_api_key(path: str):
    response = preflight(make_client(ALLOWED, "https://app.example"), path, ALLOWED)
    assert response.status_code == 200
    headers = cors_headers(response)
    assert headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in headers["access-control-allow-methods"]
    assert headers["access-control-allow-headers"] == API_HEADERS


def test_responses_to_an_allowed_origin_expose_the_request_id():
    response = make_client(ALLOWED).get("/stats", headers={"Origin": ALLOWED})
    assert response.headers["access-control-allow-origin"] == ALLOWED
    exposed = response.headers["access-control-expose-headers"].lower().split(", ")
    assert {"x-request-id", "request-id", "retry-after", "x-astrai-ignored-tools"} <= set(exposed)


def test_a_disallowed_origin_gets_no_cors_headers():
    client = make_client(ALLOWED)
    response = preflight(client, "/v1/chat/completions", "http://evil.example")
    assert response.status_code == 400
    assert "access-control-allow-origin" not in response.headers
    response = client.get("/stats", headers={"Origin": "http://evil.example"})
    # (Starlette lists the exposed headers on every response; without an allowed origin a
    # browser reads nothing.)
    assert "access-control-allow-origin" not in response.headers


def test_star_allows_any_origin():
    response = preflight(make_client("*"), "/v1/messages", "http://anywhere.example")
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "*"


def test_without_cors_origins_there_are_no_cors_headers():
    client = make_client()
    response = preflight(client, "/v1/chat/completions", ALLOWED)
    assert response.status_code == 405  # no preflight handling: the route takes POST only
    assert response.json()["error"]["message"] == "OPTIONS is not allowed on /v1/chat/completions"
    assert cors_headers(response) == {}
    assert cors_headers(client.get("/stats", headers={"Origin": ALLOWED})) == {}


@pytest.mark.parametrize(
    "origin", ["localhost:3000", "http://localhost:3000/", "", "https://a.b/c"]
)
def test_an_origin_that_no_browser_sends_is_a_config_error(origin: str):
    with pytest.raises(ValueError, match="cors_origins"):
        GatewayConfig(cors_origins=(origin,))
