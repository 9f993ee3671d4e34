"""Shared fixtures: the default model folder, a tiny random model folder, a real tiny server."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Server, build_tiny_model
from worker.model.loader import resolve_model_dir

TINY_NAME = "tiny-llama"


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The embedded default model, converted once per machine."""
    return resolve_model_dir(None)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Path:
    """A 2-layer random Llama with the default tokenizer: fast real processes."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / TINY_NAME, default_model_dir)


@pytest.fixture(scope="session")
def tiny_server(tiny_model_dir: Path) -> Iterator[Server]:
    """`astrai serve` on the tiny model, shared by every test that needs a live server."""
    server = Server(
        "serve", "--model", str(tiny_model_dir), "--dtype", "float32", "--kv-cache-mb", "64"
    )
    try:
        yield server.wait_ready()
    finally:
        server.stop()
        assert not server.group_alive(), "astrai serve left processes behind"
