"""`make bench-engine`: the engine in-process and its options next to transformers, one run."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from bench.accuracy import top1_agreement
from bench.measure import (
    RunResult,
    markdown,
    run_engine,
    run_http,
    run_transformers,
    worker_memory,
)
from bench.server import Server
from bench.workloads import w1, w2
from worker.engine.inference_engine import InferenceEngine
from worker.machine.cpu_info import has_int8_dot_product
from worker.model.model_dir import resolve_model_dir

WORKLOADS = {"W1": w1, "W2": w2}


def engine_runs(
    options: dict[str, Any], label: str, runs: list[tuple[str, int, int]]
) -> list[RunResult]:
    """One engine, several (workload, concurrency, requests) runs after a warm-up."""
    # kv_disk_mb 0: a bench starts cold; pages an earlier run left on disk would be hits.
    with InferenceEngine(**{"kv_disk_mb": 0, **options}) as engine:
        run_engine(engine, w1(), 8, 8, "warmup")
        return [run_engine(engine, WORKLOADS[name](), c, n, label) for name, c, n in runs]


def http_runs(
    label: str, runs: list[tuple[str, int, int]], *serve_args: str
) -> tuple[list[RunResult], dict[str, Any]]:
    server = Server("serve", *serve_args).wait_ready()
    try:
        run_http(w1(), 8, 8, "warmup", server)
        results = [run_http(WORKLOADS[name](), c, n, label, server) for name, c, n in runs]
        return results, worker_memory(server)
    finally:
        server.stop()


def isolated(function: Any, *args: Any) -> Any:
    """Run a measurement in a fresh process, so none inherits another's threads or memory."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    parser.add_argument("--quick", action="store_true", help="fewer requests, for a smoke run")
    parser.add_argument("--skip-transformers", action="store_true")
    args = parser.parse_args()
    scale = 4 if args.quick else 1
    n_seq, n_all = 8 // scale, 64 // scale
    model_dir = resolve_model_dir(None)
    results: list[RunResult] = []
    started = time.strftime("%Y-%m-%d %H:%M")

    def record(new: list[RunResult]) -> None:
        for result in new:
            print(
                f"{result.system} {result.workload} c={result.concurrency}: "
                f"{result.tok_s:.1f} tok/s, TTFT mean {result.ttft_mean_s:.3f} s",
                flush=True,
            )
        results.extend(new)

    accuracy = isolated(
        top1_agreement,
        model_dir,
        {
            "bfloat16 (fp32 residual + head)": {"dtype": torch.bfloat16},
            "bfloat16, bf16 head": {"dtype": torch.bfloat16, "float32_head": False},
            "int8 W8A8 (fp32 rest)": {"dtype": torch.float32, "quantization": "int8"},
            "int4 weights (bf16 rest), int4 kernel only": {
                "dtype": torch.bfloat16,
                "quantization": "int4",
                "float32_copy": False,
            },
        },
    )
    if not args.skip_transformers:
        record([isolated(run_transformers, model_dir, w1(), 1, n_seq, torch.float32)])
        record([isolated(run_transformers, model_dir, w1(), 32, n_all, torch.float32)])
        record([isolated(run_transformers, model_dir, w1(), 32, n_all, torch.bfloat16)])
    record(
        isolated(
            engine_runs,
            {},
            "astrai engine (defaults)",
            [("W1", 1, n_seq), ("W1", 8, n_all), ("W1", 32, n_all)],
        )
    )
    record(isolated(engine_runs, {}, "astrai engine (defaults), prefix cache", [("W2", 32, n_all)]))
    record(
        isolated(
            engine_runs,
            {"enable_prefix_caching": False},
            "astrai engine (defaults), no prefix cache",
            [("W2", 32, n_all)],
        )
    )
    record(
        isolated(
            engine_runs,
            {"dtype": "float32", "quantization": "none"},
            "astrai engine float32",
            [("W1", 32, n_all)],
        )
    )
    if has_int8_dot_product():  # elsewhere the engine refuses int8 (a slow loop there)
        record(
            isolated(
                engine_runs,
                {"dtype": "float32", "quantization": "int8"},
                "astrai engine int8",
                [("W1", 1, n_seq), ("W1", 32, n_all)],
            )
        )
    w1_sweep = [("W1", 1, n_seq), ("W1", 8, n_all), ("W1", 32, n_all)]
    record(isolated(engine_runs, {"quantization": "int4"}, "astrai engine int4", w1_sweep[:1]))
    record(
        isolated(
            engine_runs,
            {"quantization": "int4", "compile": True},
            "astrai engine int4 + compile",
            w1_sweep,
        )
    )
    http, memory = isolated(http_runs, "astrai serve (HTTP, defaults)", w1_sweep)
    record(http)
    fast = ("--quantization", "int4", "--compile")
    record(isolated(http_runs, "astrai serve (HTTP) int4 + compile", w1_sweep, *fast)[0])

    baseline = next((r for r in results if r.system.startswith("transformers static")), results[0])
    table = markdown(results, baseline)
    accuracy_table = "\n".join(
        ["| variant | top-1 agreement with float32 |", "|---|---|"]
        + [f"| {k} | {v:.1%} |" for k, v in accuracy.items() if k != "positions"]
    )
    print(table, accuracy_table, json.dumps(memory, indent=2), sep="\n\n")
    args.out.mkdir(parents=True, exist_ok=True)
    record_json = {
        "started": started,
        "command": "make bench",
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
        },
        "accuracy": accuracy,
        "worker_memory": memory,
        "results": [{**asdict(r), "tok_s": r.tok_s} for r in results],
    }
    (args.out / "engine.json").write_text(json.dumps(record_json, indent=2))
    (args.out / "engine.md").write_text(f"{table}\n\n{accuracy_table}\n")


if __name__ == "__main__":
    main()
