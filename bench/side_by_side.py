"""Two `astrai serve` configurations up side by side, W1 in alternating rounds.

`python -m bench.side_by_side --name NAME -- FLAGS...` measures `astrai serve FLAGS` against
the defaults (`make bench-drafts` is the defaults against `--speculative-tokens 0`). Both
servers run W1 in alternating rounds (bench/paired.py), fresh prompts each round, at 1, 8 and
32 streams. The table gives each round's throughput, the per-round ratios (first over second)
and their median, and the drafted and kept tokens the first server's worker counted.
Results: <out>/<name>.json and <out>/<name>.md (docs/BENCHMARKS.md quotes them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.measure import RunResult, run_http
from bench.paired import alternate, round_ratios
from bench.server import Server
from bench.speed_bench import point
from bench.workloads import w1
from worker.machine.cpu_info import describe as describe_cpu

# (streams, requests per round, rounds): one stream is the noisiest and the cheapest.
POINTS = ((1, 8, 4), (8, 64, 3), (32, 64, 2))
DEFAULTS_LABEL = "defaults"


@dataclass(frozen=True)
class Config:
    """One `astrai serve` configuration: its label in the table and its flags."""

    label: str
    flags: tuple[str, ...] = ()


def draft_counts(server: Server) -> tuple[int, int]:
    [worker] = server.stats()["workers"]
    return int(worker["draft_tokens"]), int(worker["accepted_draft_tokens"])


def measure(
    first: Config, second: Config, points: tuple[tuple[int, int, int], ...] = POINTS
) -> list[dict[str, Any]]:
    servers = {
        config.label: Server("serve", *config.flags).wait_ready(timeout_s=600)
        for config in (first, second)
    }
    try:
        for server in servers.values():
            run_http(w1(), 1, 2, "warmup", server)
        rows = []
        for streams, requests, rounds in points:
            drafted, kept = draft_counts(servers[first.label])
            contenders = [point(label, s, "W1", streams, requests) for label, s in servers.items()]
            results = alternate(contenders, rounds)
            now_drafted, now_kept = draft_counts(servers[first.label])
            rows.append(
                row(streams, results, first, second, now_drafted - drafted, now_kept - kept)
            )
        return rows
    finally:
        for server in servers.values():
            server.stop()


def row(
    streams: int,
    results: list[RunResult],
    first: Config,
    second: Config,
    drafted: int,
    kept: int,
) -> dict[str, Any]:
    ones = [r for r in results if r.system == first.label]
    twos = [r for r in results if r.system == second.label]
    ratios = round_ratios(ones, twos)
    return {
        "streams": streams,
        "first_tok_s": [round(r.tok_s, 1) for r in ones],
        "second_tok_s": [round(r.tok_s, 1) for r in twos],
        "ratios": [round(x, 3) for x in ratios],
        "median_ratio": round(statistics.median(ratios), 3),
        "drafted": drafted,
        "kept": kept,
    }


def table(rows: list[dict[str, Any]], first: Config, second: Config) -> str:
    lines = [
        f"| W1 streams | {first.label} tok/s (rounds) | {second.label} tok/s | ratio per round "
        "| median | drafted | kept |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['streams']} | {' / '.join(map(str, r['first_tok_s']))} "
            f"| {' / '.join(map(str, r['second_tok_s']))} "
            f"| {', '.join(f'{x:.2f}' for x in r['ratios'])} | {r['median_ratio']:.2f}× "
            f"| {r['drafted']} | {r['kept']} |"
        )
    return "\n".join(lines)


def run(first: Config, second: Config, out: Path, name: str) -> None:
    """Measure, then write <out>/<name>.json and .md and print the table."""
    started = time.strftime("%Y-%m-%d %H:%M")
    rows = measure(first, second)
    cpu = describe_cpu()
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "started": started,
        "cpu": cpu,
        "first": first.label,
        "second": second.label,
        "rows": rows,
    }
    (out / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    text = f"Run {started} on {cpu}.\n\n{table(rows, first, second)}\n"
    (out / f"{name}.md").write_text(text)
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    parser.add_argument("--name", required=True, help="file name of the results, e.g. kv-float16")
    parser.add_argument("flags", nargs=argparse.REMAINDER, help="-- then astrai serve's flags")
    args = parser.parse_args()
    flags = tuple(args.flags[1:] if args.flags[:1] == ["--"] else args.flags)
    if not flags:
        parser.error("give the flags to measure after --, e.g. -- --kv-cache-dtype float16")
    run(Config(" ".join(flags), flags), Config(DEFAULTS_LABEL), args.out, args.name)


if __name__ == "__main__":
    main()
