"""bench.request_trace against a real server: one row per request, in the order sent."""

from __future__ import annotations

import pytest

from bench.request_trace import server_itl
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow  # a real `astrai serve`


def test_server_itl_reports_each_request_in_order(tiny_server: Server):
    rows = server_itl(tiny_server.url, 3)
    assert len(rows) == 3
    for tokens, ttft, itl in rows:
        assert tokens == 128  # W1 lengths, EOS ignored
        assert 0 < ttft < 30 and 0 < itl < 5
