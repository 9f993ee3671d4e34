"""One `astrai serve` on the embedded default model, shared by the e2e modules that need it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.harness import Server


@pytest.fixture(scope="package")
def default_server() -> Iterator[Server]:
    server = Server("serve", "--kv-cache-mb", "256")
    try:
        yield server.wait_ready()
    finally:
        server.stop()
        assert not server.group_alive()
