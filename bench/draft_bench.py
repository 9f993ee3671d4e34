"""`make bench-drafts`: astrai serve with drafted tokens (the default) against drafting off,
side by side in alternating rounds (bench/side_by_side.py). Results: <out>/drafts.json and
<out>/drafts.md (docs/BENCHMARKS.md quotes them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.side_by_side import Config, run

ON = Config("drafting on (default)")
OFF = Config("--speculative-tokens 0", ("--speculative-tokens", "0"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    run(ON, OFF, parser.parse_args().out, "drafts")


if __name__ == "__main__":
    main()
