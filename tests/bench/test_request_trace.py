"""bench.request_trace against a real server: one row per request, in the order sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.request_trace import server_itl, stream_gaps, w2_http
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow  # a real `astrai serve`


def test_server_itl_reports_each_request_in_order(tiny_server: Server):
    rows = server_itl(tiny_server.url, 3)
    assert len(rows) == 3
    for tokens, ttft, itl in rows:
        assert tokens == 128  # W1 lengths, EOS ignored
        assert 0 < ttft < 30 and 0 < itl < 5


def test_w2_http_starts_its_own_server_and_reports_every_request_by_start(tiny_model_dir: Path):
    args = ["--model", str(tiny_model_dir), "--dtype", "float32", "--kv-cache-mb", "64"]
    rows = w2_http(args, concurrency=2, num_requests=4)
    assert len(rows) == 4
    starts = [start for start, _ in rows]
    # A closed loop of two: the third starts once one of the first two has finished.
    assert starts == sorted(starts) and starts[2] > starts[1]
    assert all(0 < ttft < 30 for _, ttft in rows)


def test_stream_gaps_times_a_stream_while_a_long_prompt_prefills_beside_it():
    """The default model, the fixed budget: a 1,000-token prompt in four steps of 256, each
    one the stream waited for."""
    ttft, gaps = stream_gaps(1000, prefill_step_ms=0)
    assert 0 < ttft < 120
    assert len(gaps) >= 3 and all(0 < gap < ttft for gap in gaps)
