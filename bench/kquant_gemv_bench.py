"""Few-row K-quant matmuls, ggml against our gemv: `python -m bench.kquant_gemv_bench`.

A decode step of one to a few streams reads each weight once: what counts is the rate at which
a kernel streams weights from memory. Each layer shape of a 1 B-class model is timed over 16
distinct weights in turn (hundreds of MB, past any cache), both kernels in alternating rounds,
best of each; GB/s = weight bytes read per second. The machine's plain read rate (a float sum)
is printed beside them.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Sequence

import torch

from bench.memory_bandwidth import read_bandwidth_gb_s
from worker.kernels.kquant_probe import GEMV_TYPE_IDS, gemv_types
from worker.kernels.timing import best_ms, run_each
from worker.machine.cpu_info import describe

SHAPES = {
    "qkv": (3072, 2048),
    "gate_up": (16384, 2048),
    "down": (2048, 8192),
    "output": (49152, 2048),
}
WEIGHTS = 16


@torch.inference_mode()
def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,2,4,8", help="row counts, comma-separated")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per point")
    parser.add_argument(
        "--types", default=",".join(sorted(gemv_types())), help="K-quant types (the gemv's here)"
    )
    parser.add_argument("--shapes", default="qkv,gate_up,down", help=f"of {', '.join(SHAPES)}")
    args = parser.parse_args(argv)
    missing = set(args.types.split(",")) - gemv_types()
    if missing:
        raise SystemExit(
            f"no gemv for {', '.join(sorted(missing))} here (the gemv needs AVX2; "
            "make install builds the kernels)"
        )
    torch.set_num_threads(args.threads)
    ggml, ours = torch.ops.astrai_ggml, torch.ops.astrai
    generator = torch.Generator().manual_seed(0)
    print(
        f"{describe()}; torch threads {args.threads}; a float sum reads "
        f"{read_bandwidth_gb_s():.1f} GB/s"
    )
    print("| type | layer (out × in) | rows | ggml ms (GB/s) | gemv ms (GB/s) | ggml / gemv |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.types.split(","):
        kind = GEMV_TYPE_IDS[name]
        for layer in args.shapes.split(","):
            out, width = SHAPES[layer]
            woven = int(name == "Q4_K")
            codes = ggml.quantize(torch.randn(out, width, generator=generator) * 0.02, kind)
            codes = ggml.interleave(codes, kind, width) if woven else codes
            # Each kernel reads its own layout of the same bits (ggml_linear._kernel_layout).
            layout = {"Q5_K": ours.kquant_q5k_weave, "Q6_K": ours.kquant_q6k_group}.get(name)
            mine = layout(codes) if layout else codes
            weights = [codes.clone() for _ in range(WEIGHTS)]
            our_weights = [mine.clone() for _ in range(WEIGHTS)]
            gigabytes = sum(w.numel() for w in weights) / 1e9
            for rows in (int(r) for r in args.rows.split(",")):
                x = torch.randn(rows, width, generator=generator)
                theirs = functools.partial(
                    run_each,
                    [
                        functools.partial(ggml.linear, x, [w], [kind], [out], [woven], None)
                        for w in weights
                    ],
                )
                gemv = functools.partial(
                    run_each,
                    [functools.partial(ours.kquant_gemv, x, w, kind, out) for w in our_weights],
                )
                ggml_ms = gemv_ms = float("inf")
                for _ in range(args.rounds):
                    ggml_ms = min(ggml_ms, best_ms(theirs, 2))
                    gemv_ms = min(gemv_ms, best_ms(gemv, 2))
                print(
                    f"| {name} | {layer} {out} × {width} | {rows} | "
                    f"{ggml_ms / WEIGHTS:.3f} ({gigabytes / ggml_ms * 1e3:.1f}) | "
                    f"{gemv_ms / WEIGHTS:.3f} ({gigabytes / gemv_ms * 1e3:.1f}) | "
                    f"{ggml_ms / gemv_ms:.2f}x |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
