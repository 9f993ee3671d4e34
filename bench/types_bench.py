"""`make bench-types`: the GGUF files people bring, astrai serve against llama-server on each.

For each file (the default model requantized by llama-quantize to Q4_K_M and Q8_0, the
default Q4_1 file itself, and a 1 B-class Llama in Q4_K_M, bench/bench_models.py) both servers
are up side by side and measured in alternating rounds (bench/paired.py):
- non-streamed `/v1/completions` at one stream (128 tokens, EOS ignored): tok/s;
- W1 chat over SSE at 1, 8 and 32 streams (the 1 B file only, `--w1`);
- seconds from start to ready, and each server's peak RSS (the worker's, for ours);
- the c=1 figures as a share of the weight-streaming limit: the file read once per token at the
  machine's measured memory read bandwidth (bench/memory_bandwidth.py, taken before the servers
  start);
- agreement: top-1 under teacher forcing over fixed text: at each position of the text's
  tokens, both servers' greedy next token given the text up to it (one-token completions
  from the token ids), the share of positions where they agree.
Results: <out>/types.json and <out>/types.md.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.bench_models import default_requantized, one_b
from bench.measure import RunResult, run_http
from bench.memory_bandwidth import read_bandwidth_gb_s, streaming_limit_tok_s
from bench.paired import Contender, alternate, median_ratio, median_run
from bench.server import LlamaServer, Server
from bench.speed_bench import llama_server_binary
from bench.workloads import w1
from worker.machine.cpu_info import describe as describe_cpu
from worker.model.default_model import default_model_path

OURS, PEER = "astrai serve", "llama-server"
TEACHER_TEXT = (
    "The city library opens at nine in the morning and closes at six in the evening. "
    "Visitors may borrow up to five books at a time for three weeks. Children under twelve "
    "need a parent to sign their card. The reading room on the second floor is quiet, and "
    "the café by the entrance serves tea, coffee and small cakes until five o'clock."
)
PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "To make a cup of tea, first",
    "import numpy as np\n",
)
MAX_TOKENS = 128


def post(url: str, body: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def completion(url: str, prompt: str, max_tokens: int, ignore_eos: bool) -> tuple[str, int]:
    """(text, completion tokens) of one greedy non-streamed /v1/completions request."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    body["ignore_eos"] = ignore_eos
    reply = post(f"{url}/v1/completions", body)
    return reply["choices"][0]["text"], int(reply["usage"]["completion_tokens"])


def completions_point(label: str, server: Server | LlamaServer) -> Contender:
    """One stream of non-streamed completions, a prompt per request, EOS ignored."""

    def measure(label: str, index: int) -> RunResult:
        start, tokens = time.perf_counter(), 0
        for prompt in PROMPTS[:3]:
            tokens += completion(server.url, f"Request {index}. {prompt}", MAX_TOKENS, True)[1]
        wall = time.perf_counter() - start
        return RunResult(label, "completions", 1, 3, tokens, wall, 0.0, 0.0, {})

    return Contender(label, server.process.pid, measure)


def w1_point(label: str, server: Server | LlamaServer, c: int) -> Contender:
    def measure(label: str, index: int) -> RunResult:
        return run_http(w1(variant=index + 1), c, max(2 * c, 4), label, server)

    return Contender(label, server.process.pid, measure)


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    peak_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    return peak_kb / 1024


def teacher_forced_agreement(servers: list[Server | LlamaServer], tokenizer_url: str) -> float:
    """The share of the text's positions at which every server's greedy next token agrees."""
    ids = post(f"{tokenizer_url}/tokenize", {"prompt": TEACHER_TEXT})["tokens"]
    agree = 0
    positions = range(4, len(ids))
    for end in positions:
        body = {"prompt": ids[:end], "max_tokens": 1, "temperature": 0}
        texts = {post(f"{s.url}/v1/completions", body)["choices"][0]["text"] for s in servers}
        agree += len(texts) == 1
    return agree / len(positions)


def measure_file(binary: Path, model: Path, rounds: int, w1_streams: tuple[int, ...]) -> dict:
    started = time.monotonic()
    ours = Server("serve", "--model", str(model)).wait_ready(timeout_s=900)
    ours_ready = time.monotonic() - started
    started = time.monotonic()
    peer = LlamaServer(binary, model).wait_ready(timeout_s=300)
    peer_ready = time.monotonic() - started
    try:
        servers = {OURS: ours, PEER: peer}
        agree = teacher_forced_agreement(list(servers.values()), ours.url)
        points: dict[str, Any] = {}
        runs = alternate([completions_point(k, s) for k, s in servers.items()], rounds)
        points["completions c=1"] = runs
        for c in w1_streams:
            points[f"W1 chat c={c}"] = alternate(
                [w1_point(k, s, c) for k, s in servers.items()], rounds
            )
        worker_pid = ours.stats()["workers"][0]["pid"]
        result = {
            "file": model.name,
            "file_mib": model.stat().st_size / 2**20,
            "ready_s": {OURS: ours_ready, PEER: peer_ready},
            "peak_rss_mib": {OURS: peak_rss_mib(worker_pid), PEER: peak_rss_mib(peer.process.pid)},
            "kv_reserved_mib": ours.stats()["workers"][0]["kv_bytes_reserved"] / 2**20,
            "agreement": agree,
            "points": {},
        }
        for name, results in points.items():
            mine = [r for r in results if r.system == OURS]
            theirs = [r for r in results if r.system == PEER]
            result["points"][name] = {
                OURS: median_run(mine).tok_s,
                PEER: median_run(theirs).tok_s,
                "ratio": median_ratio(mine, theirs),
                "rounds": [(r.system, r.extra["round"], r.tok_s) for r in results],
            }
        return result
    finally:
        ours.stop()
        peer.stop()


def markdown(results: list[dict[str, Any]], cpu: str, bandwidth_gb_s: float) -> str:
    lines = [f"CPU: {cpu}", f"Memory read bandwidth: {bandwidth_gb_s:.1f} GB/s", ""]
    lines += [
        "| file | MiB | point | ours tok/s | llama-server tok/s | ratio |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in results:
        for name, p in r["points"].items():
            lines.append(
                f"| {r['file']} | {r['file_mib']:.0f} | {name} | {p[OURS]:.1f} | "
                f"{p[PEER]:.1f} | {p['ratio']:.2f}x |"
            )
    lines += [
        "",
        "| file | ready ours / peer (s) | peak RSS ours / peer (MiB) | our KV (MiB) | top-1 |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['file']} | {r['ready_s'][OURS]:.1f} / {r['ready_s'][PEER]:.1f} | "
            f"{r['peak_rss_mib'][OURS]:.0f} / {r['peak_rss_mib'][PEER]:.0f} | "
            f"{r['kv_reserved_mib']:.0f} | {100 * r['agreement']:.0f}% |"
        )
    lines += [
        "",
        "| file | point | streaming limit (tok/s) | ours | llama-server |",
        "|---|---|---:|---:|---:|",
    ]
    for r in results:
        limit = streaming_limit_tok_s(int(r["file_mib"] * 2**20), bandwidth_gb_s)
        for name, p in r["points"].items():
            if name.endswith("c=1"):
                lines.append(
                    f"| {r['file']} | {name} | {limit:.0f} | {p[OURS] / limit:.0%} | "
                    f"{p[PEER] / limit:.0%} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--files",
        default="Q4_1,Q4_K_M,Q8_0,1B",
        help="Q4_1: the default file; 1B (Q4_K_M) or 1B:TYPE (another llama-quantize type): the "
        "1 B-class Llama; any other llama-quantize type: the default model in it",
    )
    parser.add_argument("--w1", default="1,8,32", help="W1 streams for the 1 B file")
    args = parser.parse_args()
    binary = llama_server_binary(None)
    if binary is None:
        raise SystemExit("llama-server is needed: bench/build_llama_server.sh")
    quantize = Path(binary).parent / "llama-quantize"
    files = {"Q4_1": lambda: default_model_path(), "1B": lambda: one_b(quantize)}
    bandwidth = read_bandwidth_gb_s()
    results = []
    for name in args.files.split(","):
        one_b_kind = name.partition(":")[2] if name.startswith("1B:") else ""
        streams = tuple(int(c) for c in args.w1.split(",")) if name.startswith("1B") else ()
        if one_b_kind:
            model = one_b(quantize, one_b_kind)
        else:
            model = files[name]() if name in files else default_requantized(quantize, name)
        results.append(measure_file(Path(binary), model, args.rounds, streams))
        print(json.dumps(results[-1]["points"], indent=1), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"memory_read_gb_s": bandwidth, "files": results}
    (args.out / "types.json").write_text(json.dumps(summary, indent=2))
    report = markdown(results, describe_cpu(), bandwidth)
    (args.out / "types.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
