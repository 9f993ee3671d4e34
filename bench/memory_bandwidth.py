"""The machine's memory read bandwidth, for the weight-streaming limit of decode at one stream."""

from __future__ import annotations

import time

import torch

BUFFER_BYTES = 1 << 30  # well past every last-level cache


def read_bandwidth_gb_s(rounds: int = 5, buffer_bytes: int = BUFFER_BYTES) -> float:
    """Bytes per second (in GB/s) torch's multi-threaded sum reads from memory, best of `rounds`:
    the rate at which a decode step can stream weights it does not find in a cache."""
    data = torch.ones(buffer_bytes // 4, dtype=torch.float32)
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - started)
    return buffer_bytes / best / 1e9


def streaming_limit_tok_s(file_bytes: int, bandwidth_gb_s: float) -> float:
    """Tokens per second at one stream if every token read the file once at that bandwidth."""
    return bandwidth_gb_s * 1e9 / file_bytes


if __name__ == "__main__":
    print(f"{read_bandwidth_gb_s():.1f} GB/s")
