"""This CPU's peak multiply-add rates on all its cores (float32 FMA, 8- and 16-bit VNNI
dot products), the ceiling the kernels' figures are measured against.

    python -m bench.arithmetic_peak [--threads N] [--iterations N]

Compiles bench/csrc/arithmetic_peak.cpp with the kernels' compiler and flags (-O3
-march=native) into a temporary folder and runs one instruction kind at a time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from worker.kernels.build import compiler_command
from worker.machine.cpu_info import describe

SOURCE = Path(__file__).parent / "csrc" / "arithmetic_peak.cpp"
KINDS = {
    "fma256": "float32 FMA, 256-bit",
    "fma512": "float32 FMA, 512-bit",
    "maddubs256": "8-bit products in pairs (AVX2 vpmaddubsw), 256-bit",
    "dpbusd256": "8-bit dot product (AVX-VNNI), 256-bit",
    "dpbusd512": "8-bit dot product (AVX512-VNNI), 512-bit",
    "dpwssd512": "16-bit dot product (AVX512-VNNI), 512-bit",
}


@dataclass(frozen=True)
class Peak:
    kind: str
    instructions_per_s: float
    macs_per_instruction: int

    @property
    def macs_per_s(self) -> float:
        return self.instructions_per_s * self.macs_per_instruction


def build(folder: Path) -> Path:
    compiler = compiler_command()
    if compiler is None:
        raise RuntimeError("no C++ compiler (CXX, c++, g++ or clang++) on PATH")
    binary = folder / "arithmetic_peak"
    command = [compiler, "-O3", "-march=native", "-fopenmp", "-std=c++20", str(SOURCE)]
    subprocess.run([*command, "-o", str(binary)], check=True)
    return binary


def measure(binary: Path, kind: str, threads: int, iterations: int) -> Peak | None:
    """The kind's rate on `threads` threads, or None where this CPU lacks it."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "spread"}
    result = subprocess.run(
        [str(binary), kind, str(iterations)], env=env, capture_output=True, text=True, check=True
    )
    fields = result.stdout.split()
    if fields[1] == "unsupported":
        return None
    return Peak(kind, float(fields[1]), int(fields[2]))


def peaks(threads: int, iterations: int = 50_000_000) -> list[Peak]:
    with tempfile.TemporaryDirectory(prefix="astrai-peak-") as folder:
        binary = build(Path(folder))
        measured = [measure(binary, kind, threads, iterations) for kind in KINDS]
    return [peak for peak in measured if peak is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--iterations", type=int, default=50_000_000)
    args = parser.parse_args()
    print(f"{describe()}; {args.threads} threads")
    print("| instruction | G instructions/s | G multiply-adds/s |")
    print("|---|---:|---:|")
    for peak in peaks(args.threads, args.iterations):
        rate, macs = peak.instructions_per_s / 1e9, peak.macs_per_s / 1e9
        print(f"| {KINDS[peak.kind]} | {rate:.2f} | {macs:.0f} |")


if __name__ == "__main__":
    main()
