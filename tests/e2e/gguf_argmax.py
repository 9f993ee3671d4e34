"""A GGUF file through our engine in a process of its own: top logits at each position, RSS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from bench.server import REPO, terminate

# The worker's KV cache, kept small: the memory rule counts what is reserved, whatever its size.
KV_CACHE_MB = 16
TOP_K = 4


class Argmax(NamedTuple):
    """What the child reports: the engine's quantization and weight paths; after each prefix
    of the ids, the TOP_K likeliest next tokens, best first, with their logits; its RSS at
    the end and at its peak (the load's), and the KV cache bytes it held."""

    quantization: str | None
    weight_paths: str
    top_ids: list[list[int]]
    top_logits: list[list[float]]
    rss_bytes: int
    peak_rss_bytes: int
    kv_bytes: int


def start(model: Path, ids: list[int]) -> subprocess.Popen[bytes]:
    """This module as a child process of its own (its peak RSS is this file's alone), on one
    thread: beside a one-thread llama-server on 2 cores, neither waits on the other's spinning
    threads (3x faster than two each; the peak RSS within 3 MiB)."""
    argv = [sys.executable, "-m", "tests.e2e.gguf_argmax", str(model), json.dumps(ids)]
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def result(child: subprocess.Popen[bytes], timeout_s: float) -> Argmax:
    """The child's report; it is stopped, whatever happens, by the time this returns."""
    try:
        out, err = child.communicate(timeout=timeout_s)
    finally:
        terminate(child, 5.0)
    if child.returncode != 0:
        raise RuntimeError(f"exited {child.returncode}: {err.decode(errors='replace')[-3000:]}")
    return Argmax(**json.loads(out))


def main() -> None:
    from bench.accuracy import sequence_logits
    from worker.engine.inference_engine import InferenceEngine

    model, ids = Path(sys.argv[1]), json.loads(sys.argv[2])
    # As `astrai serve --model FILE` loads it (quantization auto), without the drafts' probe.
    engine = InferenceEngine(model, kv_cache_mb=KV_CACHE_MB, speculative_tokens=0)
    engine.shutdown()  # the forward below is then the only user of torch's threads
    logits = sequence_logits(engine.model, ids)  # (len(ids), vocab), over a private cache
    top = logits.topk(TOP_K, dim=-1)
    config = engine.config
    private_kv = 2 * config.num_layers * len(ids) * config.num_kv_heads * config.head_dim
    private_kv *= engine.model.dtype.itemsize
    status = Path("/proc/self/status").read_text().splitlines()
    kib = {line.split(":")[0]: int(line.split()[1]) for line in status if line.startswith("Vm")}
    report = Argmax(
        engine.quantization,
        engine.model.weight_paths,
        top.indices.tolist(),
        top.values.tolist(),
        kib["VmRSS"] * 1024,
        kib["VmHWM"] * 1024,
        engine.cache.storage.bytes_reserved + private_kv,
    )
    print(json.dumps(report._asdict()))


if __name__ == "__main__":
    main()
