"""`astrai bench` against real servers: every metric in the JSON, real PNGs, errors counted."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import matplotlib.image
import pytest

from tests.e2e.harness import REPO, Server

pytestmark = pytest.mark.slow  # real processes (`astrai serve` and more)

METRICS = ("mean", "p50", "p95", "p99")


def bench(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "launcher", "bench", "--url", url, "--out", str(out)]
    argv += ["--num-requests", "4", "--max-tokens", "4", "--no-progress", *extra]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_sweep_writes_every_metric_and_two_pngs(tiny_server: Server, tmp_path: Path):
    done = bench(
        tiny_server.url, tmp_path, "--concurrency", "1,4", "--ignore-eos", "--slo-ttft", "5"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["axis"] == "concurrency" and [p["concurrency"] for p in result["points"]] == [
        1,
        4,
    ]
    for point in result["points"]:
        assert (point["requests"], point["completed"], point["errors"]) == (4, 4, 0)
        assert point["output_tokens"] == 16 and point["output_tok_s"] > 0
        assert point["req_s"] > 0 and point["goodput_req_s"] > 0
        for key in ("ttft_s", "itl_s", "latency_s"):
            assert all(point[key][m] is not None and point[key][m] >= 0 for m in METRICS)
    for name in ("throughput.png", "ttft.png"):
        image = matplotlib.image.imread(tmp_path / name)
        assert image.shape[0] > 100 and image.shape[1] > 100
    assert "out tok/s" in done.stdout


def test_anthropic_protocol_and_poisson_rate(tiny_server: Server, tmp_path: Path):
    done = bench(
        tiny_server.url,
        tmp_path,
        "--protocol",
        "anthropic",
        "--rate",
        "20",
        "--model",
        "tiny-llama",
        "--workload",
        "shared-prefix",
    )
    assert done.returncode == 0, done.stderr
    [point] = json.loads((tmp_path / "results.json").read_text())["points"]
    assert point["rate"] == 20.0 and point["completed"] == 4


@pytest.fixture(scope="module")
def no_worker_gateway() -> Iterator[Server]:
    # Requests wait for a worker until their queue timeout: a short one keeps the test short.
    server = Server("gateway", "--queue-timeout", "1")
    try:
        yield server.wait_ready(workers=0)
    finally:
        server.stop()


def test_a_failing_server_is_counted_not_crashed_on(no_worker_gateway: Server, tmp_path: Path):
    done = bench(no_worker_gateway.url, tmp_path, "--concurrency", "2")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [point] = json.loads((tmp_path / "results.json").read_text())["points"]
    assert (point["completed"], point["errors"]) == (0, 4)
    assert point["error_samples"][0].startswith("HTTP 503")


def test_a_jsonl_workload(tiny_server: Server, tmp_path: Path):
    requests = tmp_path / "mine.jsonl"
    requests.write_text('{"prompt": "Hi"}\n{"messages": [{"role": "user", "content": "Yo"}]}\n')
    done = bench(
        tiny_server.url, tmp_path / "out", "--workload", str(requests), "--concurrency", "2"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["workload"] == "mine" and result["points"][0]["completed"] == 4
