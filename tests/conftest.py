"""Shared fixtures: the default model folder, a tiny random model folder, a real tiny server;
and the logs of the servers a failing test used, printed with its report."""

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.server import ProcessLog
from tests.e2e.harness import Server, build_tiny_model
from worker.engine.cache_factory import KV_DISK_DIR_ENV
from worker.kernels.build import native_kernels_available
from worker.kernels.ggml_build import ggml_kernels_available
from worker.model.model_dir import resolve_model_dir

TINY_NAME = "tiny-llama"


@pytest.fixture(scope="session", autouse=True)
def kv_disk_folder() -> Iterator[Path]:
    """In-process engines' KV disk tier (servers get one each, bench/server.py): the
    session's own folder, so no test reads pages an earlier run left in the user's cache."""
    folder = Path(tempfile.mkdtemp(prefix="astrai-kv-tests-"))
    os.environ[KV_DISK_DIR_ENV] = str(folder)
    yield folder
    del os.environ[KV_DISK_DIR_ENV]
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def model_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for the tests that need a cache of their own but not an empty one:
    each GGUF tokenizer is converted (a child process, ~3 s) and each kernel plan measured
    once a session instead of once a test. The kernels load from the machine's cache first,
    so none is built here."""
    native_kernels_available(), ggml_kernels_available()
    return tmp_path_factory.mktemp("astrai-cache")


@pytest.fixture
def shared_cache(monkeypatch: pytest.MonkeyPatch, model_cache_dir: Path) -> Path:
    """$ASTRAI_CACHE_DIR set to the session's test cache for this test."""
    monkeypatch.setenv("ASTRAI_CACHE_DIR", str(model_cache_dir))
    return model_cache_dir


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


STARTED_AT = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[STARTED_AT] = time.time()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report ends with the tails of the server logs written while it ran."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or report.when not in ("setup", "call"):
        return
    since = item.stash.get(STARTED_AT, 0.0) - 1
    for log in ProcessLog.started:
        if log.path.exists() and log.path.stat().st_mtime >= since:
            report.sections.append((f"log of {log.name} ({log.path})", log.tail()))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if exitstatus == 0:  # kept for a look after a failure
        ProcessLog.remove_all()
