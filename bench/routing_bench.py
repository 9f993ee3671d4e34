"""Routing benchmark: 2 workers, the multi-tenant workload, round_robin vs cache_aware vs exact."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.loadgen import LoadSpec, drive_load
from bench.server import Server, wait_until
from bench.summary import summarize
from bench.workloads import multi_tenant


def run_policy(policy: str, args: argparse.Namespace) -> dict[str, Any]:
    server = Server(
        "serve",
        "--routing",
        policy,
        "--kv-cache-mb",
        str(args.kv_cache_mb),
        workers=2,
    ).wait_ready()
    try:
        workload = multi_tenant(args.num_requests, args.max_tokens)
        spec = LoadSpec(url=server.url, max_tokens=args.max_tokens, ignore_eos=True)
        records, wall = drive_load(spec, workload.conversations, concurrency=args.concurrency)
        summary = summarize(records, wall)

        def reported() -> bool:  # the workers' figures come with their heartbeats
            done = sum(w.get("total_tasks", 0) for w in server.stats()["workers"])
            return bool(done >= args.num_requests)

        wait_until(reported, 10.0)
        time.sleep(1.0)  # one more heartbeat: the last requests' hits
        workers = server.stats()["workers"]
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
