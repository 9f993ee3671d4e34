"""Routing benchmark: two workers behind one gateway or several, the multi-tenant workload."""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.loadgen import LoadSpec, drive_load
from bench.server import Server, WorkerProcess, wait_until
from bench.summary import summarize
from bench.workloads import multi_tenant


def start_servers(policy: str, args: argparse.Namespace) -> list[Server | WorkerProcess]:
    """`astrai serve --workers 2` with one gateway; with several, each its own process and
    two workers dialing all of them (one thread each, as `serve` gives them here)."""
    if args.gateways == 1:
        serve = Server(
            "serve", "--routing", policy, "--kv-cache-mb", str(args.kv_cache_mb), workers=2
        )
        return [serve.wait_ready()]
    gateways = [Server("gateway", "--routing", policy) for _ in range(args.gateways)]
    dial = [arg for gateway in gateways[1:] for arg in ("--gateway", gateway.worker_bind)]
    workers = [
        WorkerProcess(
            gateways[0].worker_bind,
            *dial,
            "--kv-cache-mb",
            str(args.kv_cache_mb),
            worker_id=f"worker-{i}",
        )
        for i in range(2)
    ]
    for gateway in gateways:
        gateway.wait_ready(workers=2)
    return [*gateways, *workers]


def run_policy(policy: str, args: argparse.Namespace) -> dict[str, Any]:
    servers = start_servers(policy, args)
    gateways = [server for server in servers if isinstance(server, Server)]
    try:
        workload = multi_tenant(args.num_requests, args.max_tokens)
        # Each gateway takes every n-th conversation, at its share of the concurrency.
        n = len(gateways)
        jobs = [
            (
                LoadSpec(url=gateway.url, max_tokens=args.max_tokens, ignore_eos=True),
                workload.conversations[i::n],
            )
            for i, gateway in enumerate(gateways)
        ]
        with ThreadPoolExecutor(n) as pool:
            results = list(
                pool.map(lambda job: drive_load(*job, concurrency=args.concurrency // n), jobs)
            )
        records = [record for part, _ in results for record in part]
        summary = summarize(records, max(wall for _, wall in results))

        def reported() -> bool:  # the workers' figures come with their heartbeats
            done = sum(w.get("total_tasks", 0) for w in gateways[0].stats()["workers"])
            return bool(done >= args.num_requests)

        wait_until(reported, 10.0)
        time.sleep(1.0)  # one more heartbeat: the last requests' hits
        workers = gateways[0].stats()["workers"]
        return {
            "routing": policy,
            "output_tok_s": summary["output_tok_s"],
            "req_s": summary["req_s"],
            "ttft_mean_s": summary["ttft_s"]["mean"],
            "errors": summary["errors"],
            "prefix_cache_hit_tokens": sum(w["prefix_cache_hit_tokens"] for w in workers),
            "prefill_tokens": sum(w["prefill_tokens"] for w in workers),
            "requests_per_worker": [w["total_tasks"] for w in workers],
        }
    finally:
        for server in servers:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-requests", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--kv-cache-mb",
        type=int,
        default=52,
        help="per worker: room for 4-5 of the 8 tenant prompts plus the running requests",
    )
    parser.add_argument(
        "--routing",
        default="round_robin,cache_aware,exact",
        help="policies, in the order run; the first is the baseline",
    )
    parser.add_argument(
        "--gateways", type=int, default=1, help="gateways sharing the two workers (the load split)"
    )
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = parser.parse_args()
    rows = [run_policy(policy, args) for policy in args.routing.split(",")]
    baseline = rows[0]
    base = baseline["routing"]
    lines = [
        f"| routing | prefix-cache hit tokens | vs {base} | prefill tokens | output tok/s "
        f"| vs {base} | TTFT mean s | requests per worker |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        hits = row["prefix_cache_hit_tokens"]
        lines.append(
            f"| {row['routing']} | {hits} "
            f"| {hits / max(1, baseline['prefix_cache_hit_tokens']):.2f}× "
            f"| {row['prefill_tokens']} | {row['output_tok_s']:.1f} "
            f"| {row['output_tok_s'] / baseline['output_tok_s']:.2f}× "
            f"| {row['ttft_mean_s']:.3f} | {row['requests_per_worker']} |"
        )
    table = "\n".join(lines)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "routing.json").write_text(
        json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=2)
    )
    (args.out / "routing.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
