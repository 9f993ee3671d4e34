"""The weight-streaming limit the GGUF types benchmark reports its one-stream figures against."""

import math

from bench.memory_bandwidth import read_bandwidth_gb_s, streaming_limit_tok_s
from bench.types_bench import OURS, PEER, markdown


def test_the_streaming_limit_is_the_bandwidth_over_the_file():
    assert streaming_limit_tok_s(2 * 10**9, 40.0) == 20.0
    assert streaming_limit_tok_s(10**9, 40.0) == 40.0


def test_a_measured_bandwidth_is_a_finite_positive_rate():
    measured = read_bandwidth_gb_s(rounds=2, buffer_bytes=8 << 20)
    assert math.isfinite(measured) and measured > 0


def test_the_report_gives_each_one_stream_point_as_a_share_of_the_limit():
    point = {OURS: 30.0, PEER: 40.0, "ratio": 0.75}
    result = {
        "file": "x.gguf",
        "file_mib": 1000.0,
        "ready_s": {OURS: 1.0, PEER: 1.0},
        "peak_rss_mib": {OURS: 1.0, PEER: 1.0},
        "kv_reserved_mib": 1.0,
        "agreement": 1.0,
        "points": {"completions c=1": point, "W1 chat c=8": point},
    }
    report = markdown([result], "a CPU", bandwidth_gb_s=1000 * 2**20 * 80 / 1e9)
    # 80 tok/s is the limit of a 1000 MiB file at that bandwidth: 30 is 38%, 40 is 50%.
    assert "| x.gguf | completions c=1 | 80 | 38% | 50% |" in report
    assert "W1 chat c=8 | 80" not in report
