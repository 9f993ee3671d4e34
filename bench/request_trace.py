"""Per-request figures in arrival order: W2 TTFT by wave (engine, or `astrai serve` over
HTTP), ITL per request (a server).

python -m bench.request_trace w2-waves [--prefill-token-budget N] [--precision exact]
python -m bench.request_trace stream-gaps --prompt 4000 --prefill-step-ms 0,250 --rounds 2
python -m bench.request_trace w2-http [--serve-arg=--speculative-tokens --serve-arg=0]
python -m bench.request_trace server-itl --url http://127.0.0.1:8200 --requests 10
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import queue
import statistics
import time

from bench.loadgen import LoadSpec, drive_load
from bench.measure import run_http
from bench.server import Server
from bench.workloads import w1, w2
from common.sampling_params import SamplingParams
from worker.engine.inference_engine import InferenceEngine
from worker.engine.sequence import TokenEvent


def w2_waves(
    concurrency: int = 32,
    num_requests: int = 64,
    prefill_token_budget: int | None = None,
    precision: str | None = None,
    prefill_step_ms: int | None = None,
) -> list[float]:
    """TTFT of each W2 request in submission order, closed loop at `concurrency`; the
    engine's defaults, or the given prefill token budget and precision."""
    workload = w2()
    params = SamplingParams(temperature=0, max_tokens=workload.max_tokens, ignore_eos=True)
    events: queue.Queue[TokenEvent] = queue.Queue()
    submitted: dict[str, float] = {}
    first: dict[str, float] = {}
    options: dict[str, int | str] = {"kv_disk_mb": 0}  # cold: no pages an earlier run left
    if prefill_token_budget is not None:
        options["prefill_token_budget"] = prefill_token_budget
    if precision is not None:
        options["precision"] = precision
    if prefill_step_ms is not None:
        options["prefill_step_ms"] = prefill_step_ms
    with InferenceEngine(**options) as engine:
        engine.generate("Hi", temperature=0, max_tokens=4)  # warm-up
        conversations = workload.conversations[:num_requests]

        def submit(i: int) -> None:
            submitted[f"r{i}"] = time.perf_counter()
            engine.submit(conversations[i], params, events.put, request_id=f"r{i}")

        for i in range(min(concurrency, len(conversations))):
            submit(i)
        next_index, done = len(submitted), 0
        while done < len(conversations):
            event = events.get(timeout=600)
            if event.token_ids and event.request_id not in first:
                first[event.request_id] = time.perf_counter()
            if event.finish_reason is not None:
                done += 1
                if next_index < len(conversations):
                    submit(next_index)
                    next_index += 1
    return [first[f"r{i}"] - submitted[f"r{i}"] for i in range(len(conversations))]


def stream_gaps(
    prompt_tokens: int, prefill_step_ms: int | None = None
) -> tuple[float, list[float]]:
    """A stream decodes while a `prompt_tokens` prompt arrives: the prompt's TTFT, and the
    stream's gaps between tokens until then (each a step it waited for)."""
    options: dict[str, int] = {"kv_disk_mb": 0, "speculative_tokens": 0}
    if prefill_step_ms is not None:
        options["prefill_step_ms"] = prefill_step_ms
    streamed: queue.Queue[TokenEvent] = queue.Queue()
    answered: queue.Queue[TokenEvent] = queue.Queue()
    with InferenceEngine(**options) as engine:
        engine.generate("Hi", temperature=0, max_tokens=4)  # warm-up
        endless = SamplingParams(temperature=0, max_tokens=4096, ignore_eos=True)
        engine.submit_prompts(["Once upon a time"], endless, streamed.put, request_id="stream")
        for _ in range(8):  # decoding steadily
            streamed.get(timeout=60)
        text = "The quick brown fox jumps over the lazy dog. " * (prompt_tokens // 10 + 1)
        prompt = engine.tokenizer.encode(text)[:prompt_tokens]
        one = SamplingParams(temperature=0, max_tokens=1)
        start, arrivals = time.perf_counter(), []
        engine.submit_prompts([prompt], one, answered.put, request_id="long")
        while answered.empty() or answered.get().finish_reason is None:
            with contextlib.suppress(queue.Empty):
                streamed.get(timeout=0.005)
                arrivals.append(time.perf_counter())
        ttft = time.perf_counter() - start
        engine.abort("stream")
    return ttft, [later - earlier for earlier, later in itertools.pairwise(arrivals)]


def w2_http(
    serve_args: list[str], concurrency: int = 32, num_requests: int = 64
) -> list[tuple[float, float]]:
    """(start s, TTFT s) of each W2 request, in order of start, through a fresh `astrai serve`
    (with `serve_args`) over HTTP, as `make bench` runs W2: once, its shared prompt cold."""
    server = Server("serve", *serve_args).wait_ready(timeout_s=600)
    try:
        run_http(w1(), 1, 2, "warmup", server)
        workload = w2()
        spec = LoadSpec(url=server.url, max_tokens=workload.max_tokens, ignore_eos=True)
        records, _ = drive_load(
            spec, workload.conversations[:num_requests], concurrency=concurrency
        )
    finally:
        server.stop()
    return sorted((r.start, r.ttft or 0.0) for r in records)


def server_itl(url: str, num_requests: int) -> list[tuple[int, float, float]]:
    """(tokens, TTFT s, ITL p50 s) of W1 requests sent one after the other to `url`."""
    spec = LoadSpec(url=url, max_tokens=128, ignore_eos=True)
    records, _ = drive_load(spec, w1().conversations[:num_requests], concurrency=1)
    return [(r.output_tokens, r.ttft or 0.0, statistics.median(r.itls or [0.0])) for r in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", choices=("w2-waves", "w2-http", "stream-gaps", "server-itl"))
    parser.add_argument("--url")
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--prefill-token-budget", type=int, default=None, help="w2-waves only")
    parser.add_argument("--precision", default=None, help="w2-waves only: file or exact")
    parser.add_argument(
        "--prefill-step-ms",
        default="",
        help="w2-waves, stream-gaps: comma-separated values, each run in turn (default: the "
        "engine's)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="w2-waves, stream-gaps")
    parser.add_argument("--prompt", type=int, default=4000, help="stream-gaps: prompt tokens")
    parser.add_argument(
        "--serve-arg", action="append", default=[], help="w2-http: an `astrai serve` argument"
    )
    args = parser.parse_args()
    if args.what == "w2-http":
        starts = w2_http(args.serve_arg)
        ttfts = [ttft for _, ttft in starts]
        print(f"mean TTFT {statistics.mean(ttfts):.3f} s over {len(ttfts)} requests")
        print(" ".join(f"{start:.2f}/{ttft:.2f}" for start, ttft in starts))
        return
    steps = [int(ms) for ms in args.prefill_step_ms.split(",") if ms] or [None]
    for _, step_ms in itertools.product(range(args.rounds), steps):
        label = "the default step time" if step_ms is None else f"--prefill-step-ms {step_ms}"
        if args.what == "stream-gaps":
            ttft, gaps = stream_gaps(args.prompt, step_ms)
            print(
                f"{label}: {args.prompt}-token prompt TTFT {ttft:.2f} s; the stream's gaps "
                f"meanwhile max {max(gaps, default=0) * 1e3:.0f} ms, "
                f"mean {statistics.mean(gaps or [0]) * 1e3:.0f} ms"
            )
        elif args.what == "w2-waves":
            ttfts = w2_waves(
                prefill_token_budget=args.prefill_token_budget,
                precision=args.precision,
                prefill_step_ms=step_ms,
            )
            half = len(ttfts) // 2
            first, second = statistics.mean(ttfts[:half]), statistics.mean(ttfts[half:])
            mean = statistics.mean(ttfts)
            print(
                f"{label}: mean TTFT {mean:.3f} s; first {half} requests {first:.3f} s, "
                f"rest {second:.3f} s"
            )
    if args.what != "server-itl":
        return
    if not args.url:
        parser.error("server-itl needs --url")
    for i, (tokens, ttft, itl) in enumerate(server_itl(args.url, args.requests)):
        print(f"request {i}: {tokens} tokens, TTFT {ttft * 1e3:.0f} ms, ITL p50 {itl * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
