"""K-quant matmuls, ggml's kernels against our panels: `python -m bench.kquant_bench`.

The layer shapes of a 1 B-class Llama (Llama-3.2-1B's: hidden 2048, FFN 8192, 32/8 heads),
each in Q4_K (woven as ggml weaves it) and Q6_K, three distinct weights timed in turn so
that they stream from memory as a step's do; per row count, ggml's kernel and the panel
kernel in alternating rounds, best of each. Milliseconds per matmul, and the ratio (above 1:
the panel is faster). What the kernel probe (worker/kernels/kquant_probe.py) decides on.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence

import torch

from worker.kernels.kquant_probe import KQUANT_TYPES, kquant_kernels_available
from worker.kernels.timing import best_ms, run_each
from worker.machine.cpu_info import describe

SHAPES = {"qkv": (3072, 2048), "o": (2048, 2048), "gate_up": (16384, 2048), "down": (2048, 8192)}
WEIGHTS = 3


@torch.inference_mode()
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,8,16,32,64,256", help="row counts, comma-separated")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per point")
    args = parser.parse_args(argv)
    if not kquant_kernels_available():
        raise SystemExit("needs the native kernels and ggml's (make install)")
    torch.set_num_threads(args.threads)
    ggml, ours = torch.ops.astrai_ggml, torch.ops.astrai
    generator = torch.Generator().manual_seed(0)
    print(f"{describe()}; torch threads {args.threads}")
    print("| type | layer (out × in) | rows | ggml (ms) | panel (ms) | ggml / panel |")
    print("|---|---|---:|---:|---:|---:|")
    for name, kind in KQUANT_TYPES.items():
        for layer, (out, width) in SHAPES.items():
            woven = int(ggml.can_interleave(kind, out))
            weights = []
            for _ in range(WEIGHTS):
                codes = ggml.quantize(torch.randn(out, width, generator=generator) * 0.02, kind)
                weights.append(ggml.interleave(codes, kind, width) if woven else codes)
            for rows in (int(r) for r in args.rows.split(",")):
                x = torch.randn(rows, width, generator=generator)
                theirs = functools.partial(
                    run_each,
                    [
                        functools.partial(ggml.linear, x, [w], [kind], [out], [woven], None)
                        for w in weights
                    ],
                )
                panel = functools.partial(
                    run_each,
                    [functools.partial(ours.kquant_linear, x, w, kind, out) for w in weights],
                )
                ggml_ms = panel_ms = float("inf")
                for _ in range(args.rounds):
                    ggml_ms = min(ggml_ms, best_ms(theirs, 3) / WEIGHTS)
                    panel_ms = min(panel_ms, best_ms(panel, 3) / WEIGHTS)
                print(
                    f"| {name} | {layer} {out} × {width} | {rows} | {ggml_ms:.3f} | "
                    f"{panel_ms:.3f} | {ggml_ms / panel_ms:.2f}x |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
