"""Measurements: one workload through the engine, through HTTP, or through transformers."""

from __future__ import annotations

import queue
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.loadgen import LoadSpec, drive_load
from bench.server import LlamaServer, Server
from bench.summary import summarize
from bench.workloads import Workload
from common.sampling_params import SamplingParams
from worker.engine.inference_engine import InferenceEngine
from worker.engine.sequence import TokenEvent


@dataclass
class RunResult:
    system: str
    workload: str
    concurrency: int
    requests: int
    output_tokens: int
    wall_s: float
    ttft_mean_s: float
    ttft_p95_s: float
    extra: dict[str, Any]

    @property
    def tok_s(self) -> float:
        return self.output_tokens / self.wall_s


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def run_engine(
    engine: InferenceEngine, workload: Workload, concurrency: int, num_requests: int, label: str
) -> RunResult:
    """Closed loop: keep `concurrency` requests in flight until `num_requests` are done."""
    params = SamplingParams(
        temperature=0, max_tokens=workload.max_tokens, ignore_eos=workload.ignore_eos
    )
    events: queue.Queue[TokenEvent] = queue.Queue()
    conversations = workload.conversations[:num_requests]
    submitted_at: dict[str, float] = {}
    first_token: dict[str, float] = {}
    tokens = 0
    stats_before = engine.stats()
    start = time.perf_counter()
    next_index = 0

    def submit_next() -> None:
        nonlocal next_index
        request_id = f"{label}-{next_index}"
        submitted_at[request_id] = time.perf_counter()
        engine.submit(conversations[next_index], params, events.put, request_id=request_id)
        next_index += 1

    for _ in range(min(concurrency, len(conversations))):
        submit_next()
    done = 0
    while done < len(conversations):
        event = events.get(timeout=600)
        if event.token_ids and event.request_id not in first_token:
            first_token[event.request_id] = time.perf_counter()
        tokens += len(event.token_ids)
        if event.finish_reason is not None:
            done += 1
            if next_index < len(conversations):
                submit_next()
    wall = time.perf_counter() - start
    ttfts = [first_token[r] - submitted_at[r] for r in submitted_at]
    stats = engine.stats()
    prompt_tokens = sum(len(engine.requests.prompt_token_ids(c)) for c in conversations)
    hits = stats.prefix_cache_hit_tokens - stats_before.prefix_cache_hit_tokens
    return RunResult(
        system=label,
        workload=workload.name,
        concurrency=concurrency,
        requests=len(conversations),
        output_tokens=tokens,
        wall_s=wall,
        ttft_mean_s=statistics.mean(ttfts),
        ttft_p95_s=p95(ttfts),
        extra={
            "prompt_tokens": prompt_tokens,
            "cached_prompt_fraction": hits / prompt_tokens,
            "preemptions": stats.preemptions - stats_before.preemptions,
        },
    )


class FirstTokenClock:
    """A transformers StoppingCriteria that only notes when the first new token exists."""

    def __init__(self) -> None:
        self.first: float | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
        if self.first is None:
            self.first = time.perf_counter()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def run_transformers(
    model_dir: Path, workload: Workload, batch_size: int, num_requests: int, dtype: torch.dtype
) -> RunResult:
    """transformers `generate`, one request at a time or static left-padded batches."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteriaList

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype).eval()
    conversations = workload.conversations[:num_requests]
    prompts = [
        tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False)
        for c in conversations
    ]
    tokens = 0
    ttfts: list[float] = []
    start = time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        batch = tokenizer(prompts[i : i + batch_size], return_tensors="pt", padding=True)
        clock = FirstTokenClock()
        with torch.inference_mode():
            out = model.generate(
                **batch,
                max_new_tokens=workload.max_tokens,
                min_new_tokens=workload.max_tokens if workload.ignore_eos else 0,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
                stopping_criteria=StoppingCriteriaList([clock]),
            )
        tokens += (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]
        assert clock.first is not None
        ttfts += [clock.first - start] * out.shape[0]  # every request arrived at t = 0
    wall = time.perf_counter() - start
    kind = "sequential" if batch_size == 1 else f"static batch {batch_size}"
    return RunResult(
        system=f"transformers {kind} {str(dtype).removeprefix('torch.')}",
        workload=workload.name,
        concurrency=batch_size,
        requests=len(prompts),
        output_tokens=tokens,
        wall_s=wall,
        ttft_mean_s=statistics.mean(ttfts),
        ttft_p95_s=p95(ttfts),
        extra={},
    )


def markdown(results: list[RunResult], baseline: RunResult) -> str:
    lines = [
        "| system | workload | concurrency | requests | output tok/s | vs baseline "
        "| tokens/request | TTFT mean s | TTFT p95 s | ITL p50 ms | cached prompt |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cached = r.extra.get("cached_prompt_fraction")
        itl = r.extra.get("itl_p50_s")
        lines.append(
            f"| {r.system} | {r.workload} | {r.concurrency} | {r.requests} | {r.tok_s:.1f} "
            f"| {r.tok_s / baseline.tok_s:.2f}× | {r.output_tokens / r.requests:.0f} "
            f"| {r.ttft_mean_s:.3f} | {r.ttft_p95_s:.3f} "
            f"| {'' if itl is None else f'{itl * 1e3:.1f}'} "
            f"| {'' if cached is None else f'{cached:.0%}'} |"
        )
    return "\n".join(lines)


def run_http(
    workload: Workload,
    concurrency: int,
    num_requests: int,
    label: str,
    server: Server | LlamaServer,
) -> RunResult:
    """The same closed loop over HTTP + SSE: our gateway (+ ZeroMQ + worker) or another server."""
    spec = LoadSpec(url=server.url, max_tokens=workload.max_tokens, ignore_eos=workload.ignore_eos)
    records, wall = drive_load(spec, workload.conversations[:num_requests], concurrency=concurrency)
    summary = summarize(records, wall)
    if summary["errors"]:
        raise RuntimeError(f"{label}: {summary['errors']} errors, e.g. {summary['error_samples']}")
    return RunResult(
        system=label,
        workload=workload.name,
        concurrency=concurrency,
        requests=summary["completed"],
        output_tokens=summary["output_tokens"],
        wall_s=wall,
        ttft_mean_s=summary["ttft_s"]["mean"],
        ttft_p95_s=summary["ttft_s"]["p95"],
        extra={
            "ttft_p50_s": summary["ttft_s"]["p50"],
            "itl_p50_s": summary["itl_s"]["p50"],
            "tpot_p50_s": summary["tpot_s"]["p50"],
        },
    )


def worker_memory(server: Server) -> dict[str, Any]:
    """Peak RSS of each worker process and its KV bytes reserved vs in use, from /stats."""
    memory = {}
    for worker in server.stats()["workers"]:
        status = Path(f"/proc/{worker['pid']}/status").read_text()
        peak_kb = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")
        )
        memory[worker["worker_id"]] = {
            "peak_rss_mib": peak_kb / 1024,
            "kv_reserved_mib": worker["kv_bytes_reserved"] / 2**20,
            "kv_peak_in_use_mib": worker.get("kv_bytes_peak_in_use", 0) / 2**20,
        }
    return memory
