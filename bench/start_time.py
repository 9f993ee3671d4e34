"""How long `astrai serve` takes from launch to a ready /health, checkouts in alternating rounds.

    python -m bench.start_time --rounds 3 [--checkout DIR ...] [-- SERVE ARGS]

Each checkout's server starts from that checkout (its own code, this interpreter), one after
the other, round by round, so that a machine's drift lands on every side alike.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.server import REPO, Server


def start_seconds(serve_args: list[str]) -> float:
    """One start of `astrai serve` with `serve_args`, launch to ready; stopped after."""
    started = time.monotonic()
    server = Server("serve", *serve_args)
    try:
        server.wait_ready(timeout_s=300)
        return time.monotonic() - started
    finally:
        server.stop()


def start_seconds_in(checkout: Path, serve_args: list[str]) -> float:
    """start_seconds, measured by a process running `checkout`'s code."""
    argv = [sys.executable, "-m", "bench.start_time", "--once", "--", *serve_args]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checkout", type=Path, action="append", default=[])
    parser.add_argument("--once", action="store_true", help="one start from this checkout")
    parser.add_argument("serve_args", nargs="*", help="arguments of `astrai serve`")
    args = parser.parse_args()
    if args.once:
        print(f"{start_seconds(args.serve_args):.2f}")
        return
    checkouts = args.checkout or [REPO]
    times: dict[Path, list[float]] = {c: [] for c in checkouts}
    for _ in range(args.rounds):
        for checkout in checkouts:
            times[checkout].append(start_seconds_in(checkout, args.serve_args))
    for checkout, seconds in times.items():
        print(f"{checkout}: " + " / ".join(f"{s:.2f}" for s in seconds) + " s")


if __name__ == "__main__":
    main()
