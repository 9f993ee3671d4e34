"""`make soak`: a bounded mixed load with random disconnects and a worker killed midway.

`astrai serve --workers 2` on the embedded model takes the mixed workload's requests at a
fixed concurrency, streamed or not, a fifth of them cut off by the client after a random
number of lines; when half are done, one worker is killed with SIGKILL (the supervisor
restarts it). Reported: requests by outcome, errors by kind, the RSS of every process at
the start and the end, and what is left when the load is over: KV pages in use, open
requests and admission slots must all be 0 (the exit status says whether they were).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.server import Server, wait_until
from bench.sse_client import HTTPStreamError, StreamingPost
from bench.workloads import mixed

CUT_SHARE = 0.2  # requests the client abandons mid-way
STREAM_SHARE = 0.7  # the rest: streamed, or answered in one body
# What must be left once the load is over (the killed worker is back).
CLEAN = {"kv_pages_in_use": 0, "open_requests": 0, "gateway_in_flight": 0, "workers": 2}


def rss_mib(pid: int) -> float | None:
    """Resident memory of a process, from /proc (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def processes(server: Server) -> dict[str, int]:
    """name → pid of the supervisor, the gateway and each worker."""
    found = {"serve": server.process.pid}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent != server.process.pid:
            continue
        worker_id = worker_id_of(cmdline)
        if b"gateway" in cmdline:
            found["gateway"] = int(entry.name)
        elif worker_id is not None:
            found[worker_id] = int(entry.name)
    return found


def worker_id_of(argv: list[bytes]) -> str | None:
    """The value of a worker's `--worker-id`, written as one argument or two."""
    for i, arg in enumerate(argv):
        if arg.startswith(b"--worker-id="):
            return arg.split(b"=", 1)[1].decode()
        if arg == b"--worker-id" and i + 1 < len(argv):
            return argv[i + 1].decode()
    return None


async def one_request(
    url: str, messages: list[dict[str, Any]], max_tokens: int, rng: random.Random
) -> str:
    """The request's outcome: ok, cut (by us), or the error kind the server gave."""
    stream = rng.random() < STREAM_SHARE
    cut_after = rng.randrange(1, 12) if rng.random() < CUT_SHARE else None
    body = {"messages": messages, "max_tokens": max_tokens, "stream": stream}
    try:
        async with StreamingPost(url, "/v1/chat/completions", body) as response:
            if response.status != 200:
                return f"HTTP {response.status}: {error_message(await response.read())}"
            seen = 0
            async for line in response.lines():
                seen += 1
                if cut_after is not None and seen >= cut_after:
                    return "cut by the client"
                if line.startswith("data: {") and '"error"' in line:
                    return f"stream error: {json.loads(line[6:])['error']['message'][:60]}"
            return "ok"
    except (OSError, HTTPStreamError, asyncio.IncompleteReadError) as exc:
        return f"connection: {type(exc).__name__}"


def error_message(body: bytes) -> str:
    """The error's message in either protocol's shape, shortened, or the body's start."""
    try:
        return str(json.loads(body)["error"]["message"])[:60]
    except (ValueError, KeyError, TypeError):
        return body[:60].decode(errors="replace")


async def run_load(server: Server, num_requests: int, concurrency: int, seed: int) -> Counter[str]:
    workload = mixed(num_requests, seed=seed)
    budgets = workload.max_tokens_each or (workload.max_tokens,) * num_requests
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    queue = list(zip(workload.conversations, budgets, strict=True))
    done = 0
    killed = False

    async def client() -> None:
        nonlocal done, killed
        while queue:
            messages, budget = queue.pop()
            outcome = await asyncio.wait_for(one_request(server.url, messages, budget, rng), 300)
            outcomes[outcome] += 1
            done += 1
            if not killed and done >= num_requests // 2:
                killed = True
                victim = processes(server).get("worker-1")
                if victim is None:  # the soak would pass without the fault it exists for
                    raise RuntimeError("worker-1's process was not found; nothing was killed")
                os.kill(victim, signal.SIGKILL)
                outcomes["(worker-1 killed)"] += 1

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return outcomes


def leftovers(server: Server) -> dict[str, int]:
    stats = server.stats()
    return {
        "kv_pages_in_use": sum(w["kv_pages_in_use"] for w in stats["workers"]),
        "open_requests": stats["open_requests"],
        "gateway_in_flight": stats["gateway"]["in_flight"],
        "workers": len(stats["workers"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the report here (JSON)")
    args = parser.parse_args()
    server = Server("serve", workers=2).wait_ready(timeout_s=600)
    try:
        started = time.monotonic()
        rss_start = {name: rss_mib(pid) for name, pid in processes(server).items()}
        outcomes = asyncio.run(run_load(server, args.requests, args.concurrency, args.seed))
        wall = time.monotonic() - started
        clean = wait_until(lambda: leftovers(server) == CLEAN, 60, 0.5)
        rss_end = {name: rss_mib(pid) for name, pid in processes(server).items()}
        report = {
            "requests": args.requests,
            "concurrency": args.concurrency,
            "wall_s": round(wall, 1),
            "outcomes": dict(outcomes.most_common()),
            "rss_mib_start": rss_start,
            "rss_mib_end": rss_end,
            "left_over": leftovers(server),
            "clean": clean,
        }
    finally:
        server.stop()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    raise SystemExit(0 if clean else 1)


if __name__ == "__main__":
    main()
