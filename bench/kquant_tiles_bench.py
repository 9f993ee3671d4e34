"""Many-row K-quant matmuls, our gemv against the tile unit: `python -m bench.kquant_tiles_bench`.

The same 8-bit arithmetic on the same bytes (csrc/kquant_gemv.h, csrc/kquant_tiles.h); each
layer shape of a 1 B-class model timed at each row count, both kernels in alternating rounds,
best of each; G = multiply-adds per second. Needs AMX-INT8.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence

import torch

from bench.kquant_gemv_bench import SHAPES
from worker.kernels.kquant_probe import GEMV_TYPE_IDS, tiles_available
from worker.kernels.timing import best_ms
from worker.machine.cpu_info import describe


@torch.inference_mode()
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="8,16,32,64,256", help="row counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per point")
    parser.add_argument("--types", default="Q4_K,Q6_K", help="of Q4_K, Q5_K, Q6_K")
    parser.add_argument("--shapes", default="qkv,gate_up,down", help=f"of {', '.join(SHAPES)}")
    args = parser.parse_args(argv)
    if not tiles_available():
        raise SystemExit("no tile kernel here: it needs AMX-INT8 (make install builds it)")
    ggml, ours = torch.ops.astrai_ggml, torch.ops.astrai
    generator = torch.Generator().manual_seed(0)
    print(f"{describe()}; torch threads {torch.get_num_threads()}\n")
    print("| type | layer (out × in) | rows | gemv ms (G/s) | tiles ms (G/s) | gemv / tiles |")
    print("|---|---|---:|---:|---:|---:|")
    layouts = {
        "Q4_K": lambda codes, width: ggml.interleave(codes, GEMV_TYPE_IDS["Q4_K"], width),
        "Q5_K": lambda codes, width: ours.kquant_q5k_weave(codes),
        "Q6_K": lambda codes, width: ours.kquant_q6k_group(codes),
    }
    for name in args.types.split(","):
        kind = GEMV_TYPE_IDS[name]
        for layer in args.shapes.split(","):
            out, width = SHAPES[layer]
            codes = ggml.quantize(torch.randn(out, width, generator=generator) * 0.02, kind)
            weight = layouts[name](codes, width)
            for rows in (int(r) for r in args.rows.split(",")):
                x = torch.randn(rows, width, generator=generator)
                gemv = functools.partial(ours.kquant_gemv, x, weight, kind, out)
                tiles = functools.partial(ours.kquant_tiles, x, weight, kind, out)
                gemv_ms = tiles_ms = float("inf")
                for _ in range(args.rounds):
                    gemv_ms = min(gemv_ms, best_ms(gemv, 3))
                    tiles_ms = min(tiles_ms, best_ms(tiles, 3))
                giga = rows * out * width / 1e6
                print(
                    f"| {name} | {layer} {out} × {width} | {rows} | {gemv_ms:.3f} "
                    f"({giga / gemv_ms:.0f}) | {tiles_ms:.3f} ({giga / tiles_ms:.0f}) | "
                    f"{gemv_ms / tiles_ms:.2f}x |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
