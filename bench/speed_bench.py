"""`make bench`: astrai serve against llama.cpp's own llama-server, same GGUF, same client.

Both servers are up side by side and driven over HTTP by the same closed-loop streaming
client: each W1 point (1, 8 and 32 streams) in alternating rounds (bench/paired.py), W2 at 32
once each, then Poisson arrivals of the mixed workload; float32 weights after, for reference.
The top-1 accuracy of the precision options is measured first.
Results: <out>/speed.json and <out>/speed.md (docs/BENCHMARKS.md quotes them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from bench.accuracy import top1_agreement
from bench.engine_bench import isolated
from bench.loadgen import LoadSpec, drive_load
from bench.measure import RunResult, run_http, worker_memory
from bench.paired import Contender, alternate
from bench.server import REPO, LlamaServer, Server
from bench.speed_report import OURS, PEER, goals_table, mixed_table, runs_table
from bench.summary import summarize
from bench.workloads import TENANTS, mixed, tenant_system_prompt, w1, w2
from worker.kernels.plan import kernel_plan
from worker.machine.cpu_info import describe as describe_cpu
from worker.model.kernel_probe import measure
from worker.model.model_dir import default_model_path, resolve_model_dir

WORKLOADS = {"W1": w1, "W2": w2}
MIXED_RATES = (0.5, 1.0, 2.0)
SLO_TTFT_S, SLO_ITL_S = 1.0, 0.1


def mixed_points(server: Any, num_requests: int) -> list[dict[str, Any]]:
    """Goodput of the mixed workload at each Poisson arrival rate, in steady state: each
    tenant's system prompt is served once first, as a running service would have."""
    workload = mixed(num_requests)
    spec = LoadSpec(url=server.url, max_tokens=workload.max_tokens, ignore_eos=False)
    tenants = [
        [
            {"role": "system", "content": tenant_system_prompt(*t)},
            {"role": "user", "content": "Hello."},
        ]
        for t in TENANTS
    ]
    drive_load(replace(spec, max_tokens=1), tenants, concurrency=1)
    points = []
    for rate in MIXED_RATES:
        records, wall = drive_load(
            spec,
            workload.conversations,
            rate=rate,
            seed=1,
            max_tokens_each=workload.max_tokens_each,
        )
        points.append({"rate": rate, **summarize(records, wall, SLO_TTFT_S, SLO_ITL_S)})
    return points


def point(label: str, server: Server | LlamaServer, workload: str, c: int, n: int) -> Contender:
    """`server` as a contender at one workload point; W1's rounds take fresh prompts."""

    def measure(label: str, index: int) -> RunResult:
        chosen = w1(variant=index) if workload == "W1" else WORKLOADS[workload]()
        return run_http(chosen, c, n, label, server)

    return Contender(label, server.process.pid, measure)  # its own session: pid = group id


def head_to_head(
    binary: str | None,
    runs: list[tuple[str, int, int]],
    rounds: int,
    mixed_requests: int,
) -> tuple[list[RunResult], dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """astrai serve (defaults) and llama-server up side by side: each W1 point in `rounds`
    alternating rounds, W2 once each (its shared prompt cold), then the mixed load on each."""
    servers: dict[str, Server | LlamaServer] = {OURS: Server("serve").wait_ready(timeout_s=600)}
    try:
        if binary is not None:
            servers[PEER] = LlamaServer(Path(binary), default_model_path()).wait_ready()
        for server in servers.values():
            run_http(w1(), 1, 2, "warmup", server)
        results: list[RunResult] = []
        for workload, c, n in runs:
            contenders = [point(label, s, workload, c, n) for label, s in servers.items()]
            results += alternate(contenders, rounds if workload == "W1" else 1)
        mixed_by_system = {
            label: mixed_points(server, mixed_requests) for label, server in servers.items()
        }
        ours = servers[OURS]
        assert isinstance(ours, Server)
        return results, mixed_by_system, worker_memory(ours)
    finally:
        for server in servers.values():
            server.stop()


def float32_runs(runs: list[tuple[str, int, int]]) -> list[RunResult]:
    """The same server with float32 weights, once per point (for reference, not a goal)."""
    label = "astrai serve --quantization none"
    server = Server("serve", "--quantization", "none").wait_ready(timeout_s=600)
    try:
        run_http(w1(), 1, 2, "warmup", server)
        return [run_http(WORKLOADS[name](), c, n, label, server) for name, c, n in runs]
    finally:
        server.stop()


def llama_server_binary(requested: str | None) -> str | None:
    """The binary to compare against: LLAMA_SERVER, or the cached build (built now if need be)."""
    if requested == "none":
        return None
    if requested:
        return requested
    script = REPO / "bench" / "build_llama_server.sh"
    result = subprocess.run([str(script)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"llama-server could not be built, left out:\n{result.stderr[-2000:]}")
        return None
    return result.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    parser.add_argument("--quick", action="store_true", help="fewer requests, for a smoke run")
    parser.add_argument(
        "--llama-server",
        default=os.environ.get("LLAMA_SERVER"),
        help="llama-server binary (default: build it with bench/build_llama_server.sh; none: skip)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds of each W1 point (median)"
    )
    args = parser.parse_args()
    scale = 4 if args.quick else 1
    n_seq, n_all, n_mixed = 8 // scale, 64 // scale, 48 // scale
    runs = [("W1", 1, n_seq), ("W1", 8, n_all), ("W1", 32, n_all), ("W2", 32, n_all)]
    started = time.strftime("%Y-%m-%d %H:%M")
    binary = llama_server_binary(args.llama_server)
    accuracy = isolated(
        top1_agreement,
        resolve_model_dir(None),
        {
            "default (the GGUF's own Q4_1 codes, precision file: 8-bit activations)": {
                "dtype": torch.float32,
                "quantization": "gguf",
                "int8_activations": True,
            },
            "--precision exact (float32 activations)": {
                "dtype": torch.float32,
                "quantization": "gguf",
            },
            "--precision exact with --kv-cache-dtype float16": {
                "dtype": torch.float32,
                "quantization": "gguf",
                "kv_dtype": torch.float16,
            },
            "bfloat16 weights (fp32 residual and head)": {"dtype": torch.bfloat16},
            "int8 W8A8 (fp32 rest)": {"dtype": torch.float32, "quantization": "int8"},
            "int4, torch's kernel (bf16 activations)": {
                "dtype": torch.bfloat16,
                "quantization": "int4",
                "float32_copy": False,
            },
        },
    )
    results, mixed_by_system, memory = isolated(head_to_head, binary, runs, args.rounds, n_mixed)
    results += isolated(float32_runs, runs[:3])
    machine = {
        "cpu": describe_cpu(),
        "torch": torch.__version__,
        "kernel_plan": kernel_plan(measure).describe(),
        "llama_server": binary,
    }
    tables = [
        runs_table(results),
        goals_table(results),
        mixed_table(mixed_by_system, SLO_TTFT_S, SLO_ITL_S),
        "| variant | top-1 agreement with float32 |\n|---|---|\n"
        + "\n".join(f"| {k} | {v:.1%} |" for k, v in accuracy.items() if k != "positions"),
    ]
    report = "\n\n".join([f"Run of {started} on {machine['cpu']}", *tables])
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {
        "started": started,
        "command": "make bench",
        "rounds": args.rounds,
        "machine": machine,
        "accuracy": accuracy,
        "worker_memory": memory,
        "results": [{**asdict(r), "tok_s": r.tok_s} for r in results],
        "mixed": mixed_by_system,
        "mixed_slo": {"ttft_s": SLO_TTFT_S, "itl_p95_s": SLO_ITL_S},
    }
    (args.out / "speed.json").write_text(json.dumps(record, indent=2))
    (args.out / "speed.md").write_text(report + "\n")


if __name__ == "__main__":
    main()
