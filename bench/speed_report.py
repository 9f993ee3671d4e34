"""The tables of `make bench`: runs side by side, the speed goals met or not, mixed-load goodput."""

from __future__ import annotations

from typing import Any

from bench.measure import RunResult

PEER = "llama.cpp llama-server"
OURS = "astrai serve (defaults)"
# (workload, concurrency, minimum ratio of our output tok/s to the peer's)
THROUGHPUT_GOALS = (("W1", 1, 1.2), ("W1", 8, 2.0), ("W1", 32, 1.5))
W2_TTFT_GOAL_S = 0.5


def _find(results: list[RunResult], system: str, workload: str, c: int) -> RunResult | None:
    matches = (r for r in results if (r.system, r.workload, r.concurrency) == (system, workload, c))
    return next(matches, None)


def runs_table(results: list[RunResult]) -> str:
    lines = [
        "| system | workload | concurrency | requests | output tok/s | vs llama-server "
        "| tokens/request | TTFT mean s | TTFT p95 s | ITL p50 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        peer = _find(results, PEER, r.workload, r.concurrency)
        ratio = f"{r.tok_s / peer.tok_s:.2f}×" if peer else ""
        itl = r.extra.get("itl_p50_s")
        lines.append(
            f"| {r.system} | {r.workload} | {r.concurrency} | {r.requests} | {r.tok_s:.1f} "
            f"| {ratio} | {r.output_tokens / r.requests:.0f} | {r.ttft_mean_s:.3f} "
            f"| {r.ttft_p95_s:.3f} | {'' if itl is None else f'{itl * 1e3:.1f}'} |"
        )
    return "\n".join(lines)


def goals_table(results: list[RunResult]) -> str:
    lines = ["| goal | measured (same run) | met? |", "|---|---|---|"]
    for workload, c, ratio in THROUGHPUT_GOALS:
        ours, peer = _find(results, OURS, workload, c), _find(results, PEER, workload, c)
        goal = f"{workload} c={c} ≥ {ratio}× llama-server"
        if ours is None or peer is None:
            lines.append(f"| {goal} | not measured | n/a |")
            continue
        got = ours.tok_s / peer.tok_s
        lines.append(
            f"| {goal} | {ours.tok_s:.1f} vs {peer.tok_s:.1f} tok/s = {got:.2f}× "
            f"| {'yes' if got >= ratio else 'no'} |"
        )
    w2 = _find(results, OURS, "W2", 32)
    if w2 is not None:
        peer = _find(results, PEER, "W2", 32)
        versus = f" (llama-server: {peer.ttft_mean_s:.2f} s)" if peer else ""
        met = "yes" if w2.ttft_mean_s <= W2_TTFT_GOAL_S else "no"
        lines.append(
            f"| W2 c=32 mean TTFT ≤ {W2_TTFT_GOAL_S} s | {w2.ttft_mean_s:.2f} s{versus} | {met} |"
        )
    return "\n".join(lines)


def mixed_table(by_system: dict[str, list[dict[str, Any]]], slo_ttft: float, slo_itl: float) -> str:
    lines = [
        f"| system | arrivals req/s | completed | goodput req/s (TTFT ≤ {slo_ttft:g} s, "
        f"ITL p95 ≤ {slo_itl * 1e3:.0f} ms) | share within SLO | TTFT p50 s | TTFT p95 s "
        "| ITL p95 ms | output tok/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def fmt(value: float | None, scale: float = 1.0, digits: int = 3) -> str:
        return "-" if value is None else f"{value * scale:.{digits}f}"

    for system, points in by_system.items():
        for p in points:
            share = p["goodput_req_s"] / p["req_s"] if p["req_s"] else 0.0
            lines.append(
                f"| {system} | {p['rate']:g} | {p['completed']}/{p['requests']} "
                f"| {p['goodput_req_s']:.2f} | {share:.0%} | {fmt(p['ttft_s']['p50'])} "
                f"| {fmt(p['ttft_s']['p95'])} | {fmt(p['itl_s']['p95'], 1e3, 1)} "
                f"| {p['output_tok_s']:.1f} |"
            )
    return "\n".join(lines)
