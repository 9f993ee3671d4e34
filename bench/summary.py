"""Turn request records into the figures a benchmark reports: latency percentiles, throughput."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from bench.loadgen import RequestRecord


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def distribution(values: Sequence[float]) -> dict[str, float | None]:
    return {
        "mean": statistics.fmean(values) if values else None,
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
    }


def summarize(
    records: Sequence[RequestRecord],
    wall_s: float,
    slo_ttft_s: float | None = None,
    slo_itl_s: float | None = None,
) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    itls = [gap for r in ok for gap in r.itls]
    output_tokens = sum(r.output_tokens for r in ok)

    def meets_slo(r: RequestRecord) -> bool:
        """TTFT within its SLO, and 95% of the request's inter-token gaps within theirs."""
        if slo_ttft_s is not None and (r.ttft is None or r.ttft > slo_ttft_s):
            return False
        itl_p95 = percentile(r.itls, 95) if r.itls else None
        return not (slo_itl_s is not None and itl_p95 is not None and itl_p95 > slo_itl_s)

    good = [r for r in ok if meets_slo(r)]
    # Time per output token after the first, per request: unlike the gaps between SSE events
    # (ITL), it counts every token of an event that carries several (drafted tokens kept).
    tpots = [
        (r.latency - r.ttft) / (r.output_tokens - 1)
        for r in ok
        if r.latency is not None and r.ttft is not None and r.output_tokens > 1
    ]
    return {
        "requests": len(records),
        "completed": len(ok),
        "errors": len(records) - len(ok),
        "error_samples": sorted({r.error for r in records if r.error})[:5],
        "wall_s": wall_s,
        "output_tokens": output_tokens,
        "output_tok_s": output_tokens / wall_s if wall_s > 0 else 0.0,
        "req_s": len(ok) / wall_s if wall_s > 0 else 0.0,
        "goodput_req_s": len(good) / wall_s if wall_s > 0 else 0.0,
        "ttft_s": distribution([r.ttft for r in ok if r.ttft is not None]),
        "itl_s": distribution(itls),
        "tpot_s": distribution(tpots),
        "latency_s": distribution([r.latency for r in ok if r.latency is not None]),
    }
