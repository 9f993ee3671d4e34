"""The native causal prefill attention against torch's SDPA, alone and in a long prompt's prefill.

`python -m bench.prefill_attention_bench [--rounds 2] [--prompt 8192]`: first one 256-token
chunk of the default model's attention shape (3 kv heads of 3 query heads, head size 64) over
256 / 2048 / 8192 keys, best of 7 calls each, both kernels in alternating rounds; then the
default model's prefill of a `--prompt`-token prompt in-process, the kernel on and off in
alternating rounds (0: skip it). Prints a markdown table with the ratios.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from bench.types_bench import TEACHER_TEXT
from worker.kernels.build import prefill_attention_available
from worker.kernels.timing import best_ms
from worker.machine.cpu_info import describe

KV_HEADS, GROUP, DIM, CHUNK = 3, 3, 64, 256


def chunk_kernels(keys: int) -> dict[str, Callable[[], object]]:
    q = torch.randn(KV_HEADS, CHUNK * GROUP, DIM)
    k, v = torch.randn(keys, KV_HEADS, DIM), torch.randn(keys, KV_HEADS, DIM)
    position = torch.arange(CHUNK).repeat_interleave(GROUP) + keys - CHUNK
    allowed = torch.arange(keys)[None, :] <= position[:, None]
    mask = torch.zeros(CHUNK * GROUP, keys).masked_fill(~allowed, float("-inf"))[None, None]
    kt, vt = k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    return {
        "sdpa": lambda: F.scaled_dot_product_attention(q[None], kt, vt, mask),
        "native": lambda: torch.ops.astrai.prefill_attention(q, k, v, GROUP),
    }


def prefill_seconds(prompt_tokens: int, native: bool) -> float:
    import worker.model.attention as attention
    from worker.engine.inference_engine import InferenceEngine

    real = attention.prefill_attention_available
    attention.prefill_attention_available = real if native else (lambda: False)  # type: ignore[assignment]
    try:
        options = {"max_model_len": 32768, "rope_scaling": "linear", "speculative_tokens": 0}
        options["kv_disk_mb"] = 0  # cold: a prompt an earlier run left on disk is no prefill
        with InferenceEngine(kv_cache_mb=1024, **options) as engine:  # type: ignore[arg-type]
            ids = engine.tokenizer.encode(TEACHER_TEXT * (prompt_tokens // 50 + 1))[:prompt_tokens]
            text = engine.tokenizer.decode(ids)
            start = time.perf_counter()
            engine.generate(text, max_tokens=1, temperature=0)
            return time.perf_counter() - start
    finally:
        attention.prefill_attention_available = real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=8192)
    args = parser.parse_args()
    if not prefill_attention_available():
        raise SystemExit("the native prefill attention is not available here (it needs AVX-512)")
    print(f"CPU: {describe()}, {torch.get_num_threads()} threads\n")
    print("| keys | SDPA ms | native ms | SDPA / native |\n|---|---|---|---|")
    for keys in (256, 2048, 8192):
        kernels = chunk_kernels(keys)
        times: dict[str, list[float]] = {"sdpa": [], "native": []}
        for _ in range(args.rounds):
            for name, fn in kernels.items():
                times[name].append(best_ms(fn, repeats=7))
        sdpa, native = min(times["sdpa"]), min(times["native"])
        print(f"| {keys} | {sdpa:.2f} | {native:.2f} | {sdpa / native:.2f}x |", flush=True)
    if args.prompt:
        print(f"\n| {args.prompt}-token prefill | SDPA s | native s | ratio |\n|---|---|---|---|")
        for round_ in range(args.rounds):
            sdpa, native = prefill_seconds(args.prompt, False), prefill_seconds(args.prompt, True)
            print(f"| round {round_ + 1} | {sdpa:.2f} | {native:.2f} | {sdpa / native:.2f}x |")


if __name__ == "__main__":
    main()
