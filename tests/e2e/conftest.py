"""End-to-end fixtures: a tiny random model folder and a real `astrai serve` on loopback."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Server, build_tiny_model

TINY_NAME = "tiny-llama"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / TINY_NAME, default_model_dir)


@pytest.fixture(scope="session")
def tiny_server(tiny_model_dir: Path) -> Iterator[Server]:
    server = Server(
        "serve", "--model", str(tiny_model_dir), "--dtype", "float32", "--kv-cache-mb", "64"
    )
    try:
        yield server.wait_ready()
    finally:
        server.stop()
        assert not server.group_alive(), "astrai serve left processes behind"
