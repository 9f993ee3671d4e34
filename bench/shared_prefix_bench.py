"""Tails behind a cached shared prompt: their step on the native shared-prefix attention or torch's.

`python -m bench.shared_prefix_bench [--tails 8,20] [--rounds 10]`: the default model in
process, W2's system prompt computed once, then for each count N, steps that prefill N
requests' tails (about twelve tokens each, one token sampled) over its cached rows, timed
whole; `astrai::shared_prefix_attention` and torch's two attentions merged
(`worker/model/shared_prefix.py`) in alternating rounds, one untimed step before each timed
one. Prints a markdown table: the median step of each and their ratio.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import time

import torch

import worker.model.attention as attention
from bench.workloads import SYSTEM_PROMPT_W2
from common.sampling_params import SamplingParams
from worker.engine.inference_engine import InferenceEngine
from worker.kernels.build import prefill_attention_available
from worker.machine.cpu_info import describe
from worker.model.shared_prefix import attend_shared, attend_shared_in_place

KERNELS = {"native": attend_shared_in_place, "torch": attend_shared}


class TailSteps:
    """An engine whose loop the bench steps itself, the shared prompt already cached."""

    def __init__(self) -> None:
        self.engine = InferenceEngine(kv_disk_mb=0)
        self.core = self.engine.scheduler
        self.core.stop()
        self.prompt = self.engine.tokenizer.encode(SYSTEM_PROMPT_W2)
        self.events: queue.Queue[object] = queue.Queue()
        self.runs = 0
        self.seconds([self.prompt])

    def seconds(self, prompts: list[list[int]]) -> float:
        """Wall time of the steps that answer `prompts` (one token each)."""
        params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
        self.runs += 1
        self.engine.submit_prompts(prompts, params, self.events.put, request_id=f"r{self.runs}")
        start = time.perf_counter()
        while self.core.has_work():
            self.core.step()
        return time.perf_counter() - start

    def tails(self, count: int) -> list[list[int]]:
        encode = self.engine.tokenizer.encode
        question = " Request {}. What is the refund policy?"
        return [self.prompt + encode(question.format(self.runs * 100 + i)) for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tails", default="8,20", help="comma-separated tail counts")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    if not prefill_attention_available():
        raise SystemExit("the native shared-prefix attention is not available here (AVX-512)")
    bench = TailSteps()
    print(f"CPU: {describe()}, {torch.get_num_threads()} threads\n")
    print("| tails | native step ms (median) | torch step ms (median) | torch / native |")
    print("|---|---|---|---|")
    for count in (int(n) for n in args.tails.split(",")):
        times: dict[str, list[float]] = {name: [] for name in KERNELS}
        for _ in range(args.rounds):
            for name, kernel in KERNELS.items():
                attention.attend_shared_in_place = kernel  # type: ignore[assignment]
                bench.seconds(bench.tails(count))
                times[name].append(bench.seconds(bench.tails(count)))
        attention.attend_shared_in_place = attend_shared_in_place  # type: ignore[assignment]
        native, other = (statistics.median(times[name]) * 1000 for name in KERNELS)
        print(f"| {count} | {native:.0f} | {other:.0f} | {other / native:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
