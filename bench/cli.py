"""`astrai bench`: sweep a server with a workload, print a summary, write JSON and plots."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.loadgen import LoadSpec, RequestRecord, drive_load
from bench.plots import plot_sweep
from bench.summary import summarize
from bench.workloads import named_workload


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--protocol", default="openai", choices=("openai", "anthropic"))
    parser.add_argument("--model", default=None, help="model name to send (default: omitted)")
    parser.add_argument(
        "--workload",
        default="chat",
        help="chat | shared-prefix | multi-tenant | mixed | FILE.jsonl",
    )
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--concurrency", default=None, help="comma list, e.g. 1,8,32")
    load.add_argument("--rate", default=None, help="Poisson arrivals, req/s (comma list)")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--ignore-eos", action="store_true")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--slo-ttft", type=float, default=None, metavar="SECONDS")
    parser.add_argument("--slo-itl", type=float, default=None, metavar="SECONDS")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--no-progress", action="store_true")


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.label, self.enabled = total, label, enabled
        self.done = self.errors = 0

    def __call__(self, record: RequestRecord) -> None:
        self.done += 1
        self.errors += not record.ok
        if self.enabled:
            filled = int(30 * self.done / self.total)
            bar = "#" * filled + "." * (30 - filled)
            sys.stderr.write(
                f"\r{self.label:>16} [{bar}] {self.done}/{self.total} errors {self.errors}"
            )
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def table(points: list[dict[str, Any]], axis: str) -> str:
    header = (
        f"{axis:>11} | {'ok/total':>9} | {'out tok/s':>9} | {'req/s':>6} | {'goodput':>7} | "
        f"{'TTFT mean':>9} | {'TTFT p95':>8} | {'ITL p50':>7} | {'TPOT p50':>8} | {'E2E p99':>7}"
    )
    lines = [header, "-" * len(header)]

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for p in points:
        lines.append(
            f"{p[axis]:>11} | {p['completed']:>4}/{p['requests']:<4} | "
            f"{p['output_tok_s']:>9.1f} | {p['req_s']:>6.2f} | {p['goodput_req_s']:>7.2f} | "
            f"{fmt(p['ttft_s']['mean']):>9} | {fmt(p['ttft_s']['p95']):>8} | "
            f"{fmt(p['itl_s']['p50']):>7} | {fmt(p['tpot_s']['p50']):>8} | "
            f"{fmt(p['latency_s']['p99']):>7}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    workload = named_workload(args.workload, args.num_requests, args.max_tokens)
    spec = LoadSpec(
        url=args.url.rstrip("/"),
        protocol=args.protocol,
        model=args.model,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos or workload.ignore_eos,
        temperature=args.temperature,
        api_key=args.api_key,
    )
    axis = "rate" if args.rate else "concurrency"
    values = [
        float(v) if axis == "rate" else int(v)
        for v in (args.rate or args.concurrency or "1,8,32").split(",")
    ]
    points = []
    for value in values:
        progress = Progress(len(workload.conversations), f"{axis} {value}", not args.no_progress)
        records, wall = drive_load(
            spec,
            workload.conversations,
            concurrency=value if axis == "concurrency" else None,
            rate=value if axis == "rate" else None,
            on_done=progress,
            max_tokens_each=workload.max_tokens_each,
        )
        points.append({axis: value, **summarize(records, wall, args.slo_ttft, args.slo_itl)})
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "url": spec.url,
        "protocol": spec.protocol,
        "workload": workload.name,
        "max_tokens": spec.max_tokens,
        "ignore_eos": spec.ignore_eos,
        "axis": axis,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "points": points,
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=2))
    plots = plot_sweep(points, axis, args.out)
    print(table(points, axis))
    print(f"results: {args.out / 'results.json'}; plots: {', '.join(str(p) for p in plots)}")
    return 0 if all(p["completed"] for p in points) else 1
