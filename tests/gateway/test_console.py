"""The web console's routes: the page and every file it loads, with their types and CSP, open
without the API key; --no-console makes / the JSON 404 of any unknown route."""

import fnmatch
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.console import CONSOLE_DIR

REPO = Path(__file__).resolve().parents[2]
TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
PAGE_REFERENCE = re.compile(r'(?:src|href)="(console/[^"]+)"')
MODULE_IMPORT = re.compile(r'^import .* from "\./([^"]+)";$', re.M)


def make_client(**options) -> TestClient:
    # No lifespan: nothing binds the worker socket; the console needs no worker to be served.
    config = GatewayConfig(worker_bind="inproc://console-test", **options)
    return TestClient(create_app(config))


def loaded_files(client: TestClient) -> set[str]:
    """Every file the page pulls in: its own references, then each module's imports."""
    found = set(PAGE_REFERENCE.findall(client.get("/").text))
    pending = [name for name in found if name.endswith(".js")]
    while pending:
        text = client.get(f"/{pending.pop()}").text
        for name in MODULE_IMPORT.findall(text):
            path = f"console/{name}"
            if path not in found:
                found.add(path)
                pending.append(path)
    return found


def test_root_serves_the_page_under_a_strict_csp():
    response = make_client().get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "script-src 'self'" in policy
    assert "connect-src 'self'" in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert '<script type="module" src="console/app.js"></script>' in response.text


def test_every_file_the_page_loads_is_served_with_its_type():
    client = make_client()
    files = loaded_files(client)
    # Every file shipped is reached from the page (none is dead), and nothing else is.
    shipped = {f"console/{p.name}" for p in CONSOLE_DIR.iterdir() if p.name != "index.html"}
    assert files == shipped
    assert {"console/app.js", "console/markdown.js", "console/console.css"} <= files
    for name in files:
        response = client.get(f"/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"] == TYPES[Path(name).suffix], name
        assert "script-src 'self'" in response.headers["content-security-policy"]


def test_the_console_needs_no_api_key_and_reveals_none():
    client = make_client(api_key="s3cret-console-key")
    for path in ["/", *(f"/{name}" for name in loaded_files(client))]:
        response = client.get(path)
        assert response.status_code == 200, path
        assert "s3cret-console-key" not in response.text
    assert client.get("/v1/models").status_code == 401  # the API itself stays closed


@pytest.mark.parametrize("path", ["/console/missing.js", "/console/index.html", "/console/app.py"])
def test_unknown_console_files_are_json_404s(path: str):
    response = make_client().get(path)
    assert response.status_code == 404
    assert response.json()["error"]["message"] == f"no route GET {path}"


def test_no_console_makes_root_the_json_404():
    client = make_client(console=False)
    for path in ("/", "/console/app.js"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.json()["error"]["message"] == f"no route GET {path}"
    assert client.get("/stats").status_code == 200


def test_package_data_ships_every_console_file():
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["gateway"]
    for path in CONSOLE_DIR.iterdir():
        name = f"console/{path.name}"
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name
