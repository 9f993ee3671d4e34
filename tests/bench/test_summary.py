"""Benchmark arithmetic: percentiles, throughput, goodput under an SLO."""

from bench.loadgen import RequestRecord
from bench.summary import percentile, summarize


def test_nearest_rank_percentiles():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


def test_summary_counts_errors_and_goodput():
    fast = RequestRecord(
        True, 0.0, ttft=0.1, latency=0.5, token_times=[0.1, 0.2, 0.3], output_tokens=3
    )
    slow = RequestRecord(True, 0.0, ttft=2.0, latency=3.0, token_times=[2.0, 2.5], output_tokens=2)
    failed = RequestRecord(False, 0.0, error="HTTP 503: no worker")
    summary = summarize([fast, slow, failed], wall_s=5.0, slo_ttft_s=1.0)
    assert (summary["requests"], summary["completed"], summary["errors"]) == (3, 2, 1)
    assert summary["output_tok_s"] == 1.0
    assert summary["req_s"] == 0.4
    assert summary["goodput_req_s"] == 0.2
    assert summary["ttft_s"]["mean"] == 1.05
    assert summary["itl_s"]["p50"] == 0.1
    assert summary["tpot_s"]["mean"] == (0.2 + 1.0) / 2  # (latency - TTFT) / (tokens - 1)
    assert summary["error_samples"] == ["HTTP 503: no worker"]


def test_the_itl_slo_holds_for_95_percent_of_a_requests_gaps():
    def with_gaps(gaps: list[float]) -> RequestRecord:
        times = [0.1]
        for gap in gaps:
            times.append(times[-1] + gap)
        return RequestRecord(True, 0.0, ttft=0.1, latency=times[-1], token_times=times)

    one_stall = with_gaps([0.05] * 19 + [0.5])  # 1 slow gap in 20: p95 is still 50 ms
    two_stalls = with_gaps([0.05] * 18 + [0.5, 0.5])  # 2 in 20: p95 is 500 ms
    summary = summarize([one_stall, two_stalls], wall_s=1.0, slo_ttft_s=1.0, slo_itl_s=0.1)
    assert summary["goodput_req_s"] == 1.0


def test_tpot_counts_every_token_of_an_event_that_carries_several():
    """Three events 30 ms apart carrying 1, 4 and 4 tokens (drafted tokens kept): the gaps
    between events read 30 ms, the time per token after the first 60 / 8 = 7.5 ms."""
    record = RequestRecord(
        True, 0.0, ttft=0.05, latency=0.11, token_times=[0.05, 0.08, 0.11], output_tokens=9
    )
    summary = summarize([record], wall_s=1.0)
    assert round(summary["itl_s"]["p50"], 6) == 0.03
    assert round(summary["tpot_s"]["p50"], 6) == 0.0075
