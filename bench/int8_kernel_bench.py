"""Our Q4_1 / Q8_0 block kernels on float32 against 8-bit activations (precision exact against
file), on the default model's shapes, at the row counts a decode step and a prefill chunk bring.

python -m bench.int8_kernel_bench [--rows 1,4,8,32,256]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from gguf import GGMLQuantizationType

from worker.kernels.build import native_kernels_available
from worker.kernels.ggml_build import ggml_kernels_available
from worker.kernels.layout import records_from_gguf
from worker.kernels.plan import kernel_plan
from worker.machine.cpu_info import describe as describe_cpu
from worker.model.block_linear import BlockLinear
from worker.model.kernel_probe import measure

# (out, in): the default model's gate/up, down and output layers.
SHAPES = ((1536, 576), (576, 1536), (49152, 576))


def best_seconds(layer: Callable[[torch.Tensor], object], x: torch.Tensor, repeats: int) -> float:
    """The best of five timings of `repeats` calls, after three to warm up."""
    for _ in range(3):
        layer(x)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            layer(x)
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", default="1,4,8,32,256")
    args = parser.parse_args()
    if not (native_kernels_available() and ggml_kernels_available()):
        raise SystemExit("needs the native kernels and ggml's (make install)")
    panel_rows = kernel_plan(measure).panel_rows  # float32: this CPU's panels, as served
    print(f"CPU: {describe_cpu()}, torch threads {torch.get_num_threads()}")
    print(f"float32 panel kernel from {panel_rows} rows (0: never)\n")
    print("| type | out x in | rows | float32 µs | 8-bit µs | 8-bit speed-up |")
    print("|---|---|---:|---:|---:|---:|")
    for block_format in ("q4_1", "q8_0"):
        kind = int(GGMLQuantizationType[block_format.upper()])
        for out, k in SHAPES:
            codes = torch.ops.astrai_ggml.quantize(torch.randn(out, k), kind)
            records = records_from_gguf(codes, block_format)
            exact = BlockLinear(records, None, block_format, panel_rows)
            file = BlockLinear(records, None, block_format, panel_rows, int8=True)
            for rows in (int(r) for r in args.rows.split(",")):
                x = torch.randn(rows, k)
                repeats = max(2, int(2000 / rows / (out / 1536)))
                a = best_seconds(exact, x, repeats)
                b = best_seconds(file, x, repeats)
                print(
                    f"| {block_format.upper()} | {out} x {k} | {rows} | {a * 1e6:.0f} | "
                    f"{b * 1e6:.0f} | {a / b:.2f}x |"
                )


if __name__ == "__main__":
    main()
