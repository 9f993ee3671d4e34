"""A model loaded on demand against a standalone serve of it: the first answer's wait.

`python -m bench.model_load_bench --first PATH [--rounds 3]`: in each round, `astrai serve`
of the default model alone, timed from launch to its first chat answer; then `astrai serve
--model PATH --model default` (PATH loads at start, the default model on demand), timed from
the request that loads the default model to its answer. The goal: on demand within the
standalone time + 0.5 s.
"""

from __future__ import annotations

import argparse
import time

import httpx

from bench.server import Server
from worker.machine.cpu_info import describe

MODEL = "SmolLM2-135M-Instruct"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
OPTIONS = ("--kv-cache-mb", "64")


def first_answer(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.post(f"{url}/v1/chat/completions", json=BODY, timeout=timeout_s).is_success:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError("no answer")


def timed_serve(*args: str, wait_ready: bool) -> float:
    start = time.monotonic()
    server = Server("serve", *args, *OPTIONS)
    try:
        if wait_ready:
            server.wait_ready()
            start = time.monotonic()
        first_answer(server.url)
        return time.monotonic() - start
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", required=True, help="the model loaded at start")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(describe())
    for round_ in range(args.rounds):
        alone = timed_serve("--model", "default", wait_ready=False)
        demand = timed_serve("--model", args.first, "--model", "default", wait_ready=True)
        print(
            f"round {round_}: standalone launch to first answer {alone:.2f} s; "
            f"on demand request to answer {demand:.2f} s ({demand - alone:+.2f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
