"""`make bench-drafts`: astrai serve with drafted tokens (the default) against drafting off.

Both servers are up side by side and run W1 in alternating rounds (bench/paired.py), fresh
prompts each round, at 1, 8 and 32 streams. The table gives each round's throughput, the
per-round ratios and their median, and the drafted and kept tokens the worker counted.
Results: <out>/drafts.json and <out>/drafts.md (docs/BENCHMARKS.md quotes them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.measure import RunResult, run_http
from bench.paired import alternate, round_ratios
from bench.server import Server
from bench.speed_bench import point
from bench.workloads import w1
from worker.machine.cpu_info import describe as describe_cpu

ON, OFF = "drafting on (default)", "--speculative-tokens 0"
# (streams, requests per round, rounds): one stream is the noisiest and the cheapest.
POINTS = ((1, 8, 4), (8, 64, 3), (32, 64, 2))


def draft_counts(server: Server) -> tuple[int, int]:
    [worker] = server.stats()["workers"]
    return int(worker["draft_tokens"]), int(worker["accepted_draft_tokens"])


def measure(points: tuple[tuple[int, int, int], ...]) -> list[dict[str, Any]]:
    servers = {
        ON: Server("serve").wait_ready(timeout_s=600),
        OFF: Server("serve", "--speculative-tokens", "0").wait_ready(timeout_s=600),
    }
    try:
        for server in servers.values():
            run_http(w1(), 1, 2, "warmup", server)
        rows = []
        for streams, requests, rounds in points:
            drafted, kept = draft_counts(servers[ON])
            contenders = [point(label, s, "W1", streams, requests) for label, s in servers.items()]
            results = alternate(contenders, rounds)
            now_drafted, now_kept = draft_counts(servers[ON])
            rows.append(row(streams, results, now_drafted - drafted, now_kept - kept))
        return rows
    finally:
        for server in servers.values():
            server.stop()


def row(streams: int, results: list[RunResult], drafted: int, kept: int) -> dict[str, Any]:
    on = [r for r in results if r.system == ON]
    off = [r for r in results if r.system == OFF]
    ratios = round_ratios(on, off)
    return {
        "streams": streams,
        "on_tok_s": [round(r.tok_s, 1) for r in on],
        "off_tok_s": [round(r.tok_s, 1) for r in off],
        "ratios": [round(x, 3) for x in ratios],
        "median_ratio": round(statistics.median(ratios), 3),
        "drafted": drafted,
        "kept": kept,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"| W1 streams | {ON} tok/s (rounds) | {OFF} tok/s | ratio per round | median "
        "| drafted | kept |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['streams']} | {' / '.join(map(str, r['on_tok_s']))} "
            f"| {' / '.join(map(str, r['off_tok_s']))} "
            f"| {', '.join(f'{x:.2f}' for x in r['ratios'])} | {r['median_ratio']:.2f}× "
            f"| {r['drafted']} | {r['kept']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M")
    rows = measure(POINTS)
    cpu = describe_cpu()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "drafts.json").write_text(
        json.dumps({"started": started, "cpu": cpu, "rows": rows}, indent=2) + "\n"
    )
    text = f"Run {started} on {cpu}.\n\n{table(rows)}\n"
    (args.out / "drafts.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
