"""The tables of `make bench`: runs side by side, the speed goals met or not, mixed-load goodput."""

from __future__ import annotations

import statistics
from typing import Any

from bench.measure import RunResult
from bench.paired import median_run, round_ratios

PEER = "llama.cpp llama-server"
OURS = "astrai serve (defaults)"
# (workload, concurrency, minimum ratio of our output tok/s to the peer's)
THROUGHPUT_GOALS = (("W1", 1, 1.2), ("W1", 8, 2.0), ("W1", 32, 1.5))
W2_TTFT_GOAL_S = 0.5


def _runs(results: list[RunResult], system: str, workload: str, c: int) -> list[RunResult]:
    return [r for r in results if (r.system, r.workload, r.concurrency) == (system, workload, c)]


def _ratio(results: list[RunResult], ours: list[RunResult]) -> tuple[float, list[float]] | None:
    """Median of the per-round ratios against the peer at the same point, and the ratios."""
    first = ours[0]
    peer = _runs(results, PEER, first.workload, first.concurrency)
    if not peer:
        return None
    ratios = round_ratios(ours, peer)
    if not ratios:  # measured once each, not in rounds
        ratios = [median_run(ours).tok_s / median_run(peer).tok_s]
    return statistics.median(ratios), ratios


def _points(results: list[RunResult]) -> list[tuple[str, str, int]]:
    return list(dict.fromkeys((r.system, r.workload, r.concurrency) for r in results))


def runs_table(results: list[RunResult]) -> str:
    """One line per system and point: the run of median throughput, with every round's."""
    lines = [
        "| system | workload | concurrency | requests | output tok/s (median) | rounds tok/s "
        "| vs llama-server | tokens/request | TTFT mean s | TTFT p95 s | ITL p50 ms "
        "| TPOT p50 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for point in _points(results):
        runs = _runs(results, *point)
        r = median_run(runs)
        ratio = _ratio(results, runs)
        itl, tpot = r.extra.get("itl_p50_s"), r.extra.get("tpot_p50_s")
        each = " / ".join(f"{x.tok_s:.1f}" for x in runs)
        lines.append(
            f"| {r.system} | {r.workload} | {r.concurrency} | {r.requests} | {r.tok_s:.1f} "
            f"| {each} | {'' if ratio is None else f'{ratio[0]:.2f}×'} "
            f"| {r.output_tokens / r.requests:.0f} | {r.ttft_mean_s:.3f} "
            f"| {r.ttft_p95_s:.3f} | {'' if itl is None else f'{itl * 1e3:.1f}'} "
            f"| {'' if tpot is None else f'{tpot * 1e3:.1f}'} |"
        )
    return "\n".join(lines)


def goals_table(results: list[RunResult]) -> str:
    lines = ["| goal | measured (same run) | met? |", "|---|---|---|"]
    for workload, c, goal_ratio in THROUGHPUT_GOALS:
        ours = _runs(results, OURS, workload, c)
        ratio = _ratio(results, ours) if ours else None
        goal = f"{workload} c={c} ≥ {goal_ratio}× llama-server"
        if ratio is None:
            lines.append(f"| {goal} | not measured | n/a |")
            continue
        got, each = ratio
        peer = median_run(_runs(results, PEER, workload, c))
        rounds = f" (rounds: {', '.join(f'{x:.2f}×' for x in each)})" if len(each) > 1 else ""
        lines.append(
            f"| {goal} | {median_run(ours).tok_s:.1f} vs {peer.tok_s:.1f} tok/s, median ratio "
            f"{got:.2f}×{rounds} | {'yes' if got >= goal_ratio else 'no'} |"
        )
    w2 = _runs(results, OURS, "W2", 32)
    if w2:
        ours_w2 = median_run(w2)
        peer_w2 = _runs(results, PEER, "W2", 32)
        versus = f" (llama-server: {median_run(peer_w2).ttft_mean_s:.2f} s)" if peer_w2 else ""
        met = "yes" if ours_w2.ttft_mean_s <= W2_TTFT_GOAL_S else "no"
        lines.append(
            f"| W2 c=32 mean TTFT ≤ {W2_TTFT_GOAL_S} s | {ours_w2.ttft_mean_s:.2f} s{versus} "
            f"| {met} |"
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
