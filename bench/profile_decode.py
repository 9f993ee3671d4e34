"""Where a decode step's time goes: forward vs sampling/bookkeeping, and the forward's ops."""

from __future__ import annotations

import argparse
import threading
import time
from collections import defaultdict
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from bench.workloads import w1
from common.sampling_params import SamplingParams
from worker.engine.inference_engine import InferenceEngine
from worker.engine.options import EngineOptions


def check_batch(batch: int, conversations: int, max_seqs: int) -> None:
    """Refuse a batch the run cannot form: one W1 conversation per sequence, all decoded in one
    step (otherwise no step is ever profiled and the run waits out its timeouts)."""
    if not 1 <= batch <= conversations:
        raise SystemExit(f"--batch {batch}: W1 has {conversations} conversations (1 to that)")
    if batch > max_seqs:
        raise SystemExit(f"--batch {batch}: the engine decodes at most {max_seqs} sequences a step")


def profile_decode(batch: int, steps: int, options: dict[str, Any]) -> str:
    """Run `batch` W1 requests; time and profile `steps` decode forwards on the engine thread."""
    conversations = w1().conversations
    check_batch(batch, len(conversations), EngineOptions().max_seqs)
    with InferenceEngine(**{"kv_disk_mb": 0, **options}) as engine:  # cold, as a bench
        runner, sampler = engine.scheduler.runner, engine.scheduler.sampler
        scheduler = engine.scheduler.scheduler
        timings: dict[str, float] = defaultdict(float)
        op_times: dict[str, float] = defaultdict(float)
        counted = {"decode": 0}
        forward, sample, update = runner.forward, sampler.sample, scheduler.update

        def timed_forward(chunks: Any) -> torch.Tensor:
            is_decode = all(len(c.token_ids) == 1 for c in chunks) and len(chunks) == batch
            if not is_decode or counted["decode"] >= steps:
                return forward(chunks)
            counted["decode"] += 1
            start = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                logits = forward(chunks)
            timings["forward"] += time.perf_counter() - start
            for event in prof.key_averages():
                op_times[event.key] += event.self_cpu_time_total / 1e3  # ms
            return logits

        def timed(name: str, function: Any) -> Any:
            def run(*args: Any) -> Any:
                start = time.perf_counter()
                result = function(*args)
                rows = len(args[0].samples if name == "update" else args[0])
                if rows == batch and 0 < counted["decode"] <= steps:
                    timings["sample+postprocess"] += time.perf_counter() - start
                return result

            return run

        runner.forward = timed_forward  # type: ignore[method-assign]
        sampler.sample = timed("sample", sample)  # type: ignore[method-assign]
        scheduler.update = timed("update", update)  # type: ignore[method-assign]
        done = threading.Semaphore(0)
        params = SamplingParams(temperature=0, max_tokens=steps + 8, ignore_eos=True)
        for conversation in conversations[:batch]:
            engine.submit(
                conversation, params, lambda e: done.release() if e.finish_reason else None
            )
        for _ in range(batch):
            if not done.acquire(timeout=600):
                raise SystemExit("a request did not finish within 600 s")
    if counted["decode"] == 0:
        raise SystemExit(
            f"no decode step ran all {batch} sequences together: the KV cache held fewer at "
            "once (a smaller --batch)"
        )
    steps = counted["decode"]  # fewer than asked where the requests finished first
    profiled = sum(op_times.values())
    sampling_ms = timings["sample+postprocess"] / steps * 1e3
    lines = [
        f"decode step at batch {batch}, {steps} steps, options {options or 'default'}:",
        f"  forward {timings['forward'] / steps * 1e3:.1f} ms/step "
        f"(profiled, with profiler overhead), "
        f"sampling + stop checks + detokenization {sampling_ms:.2f} ms/step",
        "",
        "| op | ms per step | share of forward |",
        "|---|---|---|",
    ]
    for name, ms in sorted(op_times.items(), key=lambda kv: -kv[1])[:12]:
        lines.append(f"| `{name}` | {ms / steps:.2f} | {ms / profiled:.0%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--quantization", default=None)
    parser.add_argument("--model", default=None, help="a GGUF file or folder (default model)")
    args = parser.parse_args()
    options = {"model": args.model, "dtype": args.dtype, "quantization": args.quantization}
    print(profile_decode(args.batch, args.steps, options))


if __name__ == "__main__":
    main()
