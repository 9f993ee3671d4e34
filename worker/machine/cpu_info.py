"""What CPU this is: model name, instruction-set flags and a signature to key cached choices."""

from __future__ import annotations

import functools
import hashlib
import platform
from pathlib import Path

# The flags that decide which kernels are worth having, in the order logs print them.
KERNEL_FLAGS = (
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "amx_bf16",
    "amx_int8",
)


@functools.cache
def _cpuinfo() -> tuple[str, frozenset[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), frozenset()
    model, flags = platform.machine(), frozenset[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == platform.machine():
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = frozenset(value.split())
    return model, flags


def cpu_model() -> str:
    return _cpuinfo()[0]


def cpu_flags() -> frozenset[str]:
    return _cpuinfo()[1]


def has_native_bf16() -> bool:
    """bf16 arithmetic in hardware (AVX512-BF16 or AMX): where bfloat16 weights pay off."""
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def has_int8_dot_product() -> bool:
    """An int8 dot-product instruction (AVX512-VNNI, AVX-VNNI or AMX): where torch's int8
    matmul is fast. Without one it ran far below float32 (docs/BENCHMARKS.md)."""
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & cpu_flags())


def kernel_flags() -> list[str]:
    """The flags of KERNEL_FLAGS this CPU has."""
    return [flag for flag in KERNEL_FLAGS if flag in cpu_flags()]


def describe() -> str:
    """One line for logs and benchmark tables: model, core count and the flags that matter."""
    import os

    flags = " ".join(kernel_flags()) or "none of " + " ".join(KERNEL_FLAGS)
    return f"{cpu_model()}, {os.cpu_count()} cores, flags: {flags}"


def cpu_signature() -> str:
    """Stable for one CPU model and instruction set; what cached kernel choices are keyed by."""
    model, flags = _cpuinfo()
    text = f"{platform.machine()}|{model}|{' '.join(sorted(flags))}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]
