"""What structured output costs: `python -m bench.grammar_bench` (or `make bench-grammar`).

One `astrai serve`, W1 at 32 streams (128 tokens, EOS ignored), every request free or every
request under a JSON schema, in alternating rounds of the same run; then the compile time of
a typical tool schema, cold and cached. Prints a markdown table; --out writes it as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.loadgen import LoadSpec, drive_load
from bench.server import Server
from bench.summary import summarize
from bench.workloads import w1
from worker.machine.cpu_info import describe as describe_cpu

# An answer with a list longer than the token budget: constrained rows generate as many
# tokens as free ones (each run is cut at 128), so tokens per second compare like for like.
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string"},
        "points": {"type": "array", "items": {"type": "string"}, "minItems": 64},
    },
    "required": ["answer", "points"],
    "additionalProperties": False,
}
TOOL = {
    "name": "search_flights",
    "parameters": {
        "type": "object",
        "properties": {
            "origin": {"type": "string", "minLength": 3, "maxLength": 3},
            "destination": {"type": "string", "minLength": 3, "maxLength": 3},
            "date": {"type": "string", "format": "date"},
            "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
            "cabin": {"enum": ["economy", "premium", "business", "first"]},
        },
        "required": ["origin", "destination", "date"],
        "additionalProperties": False,
    },
}


def throughput(server: Server, rounds: int, requests: int) -> list[dict[str, Any]]:
    workload = w1()
    free = LoadSpec(url=server.url, max_tokens=workload.max_tokens, ignore_eos=True)
    schema = {"name": "answer", "schema": ANSWER_SCHEMA, "strict": True}
    constrained = replace(
        free, extra_body={"response_format": {"type": "json_schema", "json_schema": schema}}
    )
    conversations = workload.conversations[:requests]
    # Warm both paths: the first constrained request builds the grammar tokenizer (~0.5 s).
    for spec in (free, constrained):
        drive_load(replace(spec, max_tokens=8), conversations[:4], concurrency=4)
    rows = []
    for round_index in range(rounds):
        order = [("free", free), ("json_schema", constrained)]
        for label, spec in order if round_index % 2 == 0 else order[::-1]:
            before = _worker_stats(server)
            records, wall = drive_load(spec, conversations, concurrency=32)
            summary = summarize(records, wall)
            after = _worker_stats(server)
            rows.append(
                {
                    "round": round_index,
                    "requests": label,
                    "tok_s": summary["output_tokens"] / wall,
                    "tokens_per_request": summary["output_tokens"] / max(1, summary["completed"]),
                    "errors": summary["errors"],
                    "mask_ms_per_row": 1e3
                    * (after["grammar_mask_seconds"] - before["grammar_mask_seconds"])
                    / max(1, after["grammar_masked_rows"] - before["grammar_masked_rows"]),
                }
            )
            print(rows[-1], flush=True)
    return rows


def compile_times() -> dict[str, float]:
    """Milliseconds to get a matcher for the tool schema: grammar and matcher, cold then cached."""
    from common.sampling_params import SamplingParams
    from common.tool_calls import _compiled, tool_call_grammar
    from worker.model.model_dir import default_model_path, resolve_model_dir
    from worker.sampling.grammar import GrammarCompiler
    from worker.text.tokenizer import Tokenizer

    tokenizer = Tokenizer(resolve_model_dir(default_model_path()))
    compiler = GrammarCompiler(tokenizer.backend, tokenizer.vocab_size, tokenizer.eos_token_id)
    params = SamplingParams(tools=(TOOL,), tool_choice="required")
    compiler.matcher(SamplingParams(tools=({"name": "warm_up"},), tool_choice="required"))
    _compiled.cache_clear()
    start = time.perf_counter()
    tool_call_grammar(params.tools, "required", True)
    grammar_cold = time.perf_counter() - start
    start = time.perf_counter()
    compiler.matcher(params)
    matcher_cached_grammar = time.perf_counter() - start
    return {
        "grammar_cold_ms": grammar_cold * 1e3,
        "matcher_with_cached_grammar_ms": matcher_cached_grammar * 1e3,
    }


def _worker_stats(server: Server) -> dict[str, float]:
    time.sleep(1.1)  # worker figures reach /stats with the next heartbeat
    [worker] = server.stats()["workers"]
    return worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of free + constrained")
    parser.add_argument("--requests", type=int, default=64, help="requests per run")
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    args = parser.parse_args()
    server = Server("serve").wait_ready(timeout_s=600)
    try:
        rows = throughput(server, args.rounds, args.requests)
    finally:
        server.stop()
    compile_ms = compile_times()
    free = [r["tok_s"] for r in rows if r["requests"] == "free"]
    constrained = [r["tok_s"] for r in rows if r["requests"] == "json_schema"]
    ratio = sum(constrained) / sum(free)
    print(f"CPU {describe_cpu()}")
    print("| requests | tok/s per round | mean | tokens per request | mask ms per row |")
    print("|---|---|---|---|---|")
    for label, values in (("free", free), ("json_schema", constrained)):
        mine = [r for r in rows if r["requests"] == label]
        per_round = ", ".join(f"{v:.1f}" for v in values)
        tokens = sum(r["tokens_per_request"] for r in mine) / len(mine)
        mask = sum(r["mask_ms_per_row"] for r in mine) / len(mine)
        mean = sum(values) / len(values)
        print(f"| {label} | {per_round} | {mean:.1f} | {tokens:.1f} | {mask:.3f} |")
    print(f"\nconstrained / free throughput: {ratio:.3f}")
    print(f"tool schema compile: {json.dumps({k: round(v, 2) for k, v in compile_ms.items()})}")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "ratio": ratio, "compile_ms": compile_ms}))


if __name__ == "__main__":
    main()
