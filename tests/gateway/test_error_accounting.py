"""Every refused or failed request is answered in its protocol's shape and counted in /metrics."""

from starlette.testclient import TestClient

from gateway.app import Gateway
from gateway.config import GatewayConfig

BODY = {"messages": [{"role": "user", "content": "hi"}]}


def make_gateway() -> tuple[Gateway, TestClient]:
    # No lifespan: nothing binds the worker socket; these requests never reach a worker.
    gateway = Gateway(GatewayConfig(worker_bind="inproc://errors-test", api_key="secret"))
    return gateway, TestClient(gateway.app())


def counted(client: TestClient, protocol: str, status: int) -> int:
    text = client.get("/metrics").text
    prefix = f'astrai_requests_total{{protocol="{protocol}",status="{status}"}} '
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    return int(float(lines[0].removeprefix(prefix))) if lines else 0


def test_an_unexpected_failure_is_a_counted_500_in_the_protocols_shape():
    gateway, client = make_gateway()

    async def broken(request):
        raise RuntimeError("a bug")

    gateway.anthropic.handle = broken
    headers = {"x-api-key": "secret"}
    response = client.post("/v1/messages", json=BODY, headers=headers)
    assert response.status_code == 500
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "api_error"
    assert "a bug" not in response.text  # details stay in the gateway's log
    assert counted(client, "anthropic", 500) == 1


def test_a_refused_api_key_is_counted():
    _, client = make_gateway()
    response = client.post("/v1/chat/completions", json=BODY)
    assert response.status_code == 401
    assert counted(client, "openai", 401) == 1


def test_while_draining_requests_get_503_with_retry_after():
    gateway, client = make_gateway()
    gateway.begin_drain()
    headers = {"authorization": "Bearer secret"}
    response = client.post("/v1/chat/completions", json=BODY, headers=headers)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.json()["error"]["message"] == "the gateway is shutting down"
    assert counted(client, "openai", 503) == 1


def test_a_body_that_is_not_declared_json_gets_415():
    _, client = make_gateway()
    headers = {"authorization": "Bearer secret"}
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        response = client.post(
            "/v1/chat/completions",
            content=b'{"messages": []}',
            headers={**headers, "content-type": content_type},
        )
        assert response.status_code == 415, content_type
        assert content_type in response.json()["error"]["message"]
    assert counted(client, "openai", 415) == 3


def test_json_media_types_and_a_missing_content_type_are_read_as_json():
    _, client = make_gateway()
    headers = {"authorization": "Bearer secret"}
    for content_type in ("application/json; charset=utf-8", "application/vnd.api+json", None):
        extra = {} if content_type is None else {"content-type": content_type}
        response = client.post(
            "/v1/chat/completions", content=b"{not json", headers={**headers, **extra}
        )
        # Read as JSON (and refused as malformed JSON), not refused for its media type.
        assert response.status_code == 400, content_type
        assert "not valid JSON" in response.json()["error"]["message"]


TOKENIZE_ROUTES = (
    ("openai", "/tokenize", {"prompt": "hi"}, {"authorization": "Bearer secret"}),
    ("anthropic", "/v1/messages/count_tokens", {"model": "m", **BODY}, {"x-api-key": "secret"}),
)


def test_while_draining_token_counting_gets_503_with_retry_after():
    gateway, client = make_gateway()
    gateway.begin_drain()
    for (protocol, path, body, headers), status in zip(TOKENIZE_ROUTES, (503, 529), strict=True):
        response = client.post(path, json=body, headers=headers)
        assert response.status_code == status, path  # Anthropic's "overloaded" for 503
        assert response.headers["retry-after"] == "5"
        assert "shutting down" in response.text
        assert counted(client, protocol, status) == 1


def test_token_counting_waits_for_an_admission_slot_like_any_request():
    gateway, client = make_gateway()
    admission = gateway.admission
    admission.max_in_flight, admission.max_queued = 1, 0
    admission.in_flight = 1  # one generation holds the only slot
    for protocol, path, body, headers in TOKENIZE_ROUTES:
        response = client.post(path, json=body, headers=headers)
        assert response.status_code == (429 if protocol == "openai" else 529), path
        assert "retry-after" in response.headers
        assert admission.in_flight == 1  # a refused request takes nothing
    assert admission.rejected == 2
