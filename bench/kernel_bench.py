"""The linear layers of one decode step, kernel by kernel: `python -m bench.kernel_bench`.

Times the 120 layer matmuls (30 layers x qkv, o, gate/up, down, with the default model's
shapes and distinct weights, so they stream from memory as in a real step) and the output
layer, for several row counts, through: the native Q4_1/Q8_0 block kernels (direct and
panel), torch's int4 kernel (bf16 activations) and float32 in the layouts PackedLinear knows.
Best of 5 repeats; milliseconds per step. Then the decode attention of the 30 layers
(`astrai::decode_attention`) over paged caches of 200 keys per sequence.
"""

from __future__ import annotations

import argparse

import torch

from worker.kernels.build import native_kernels_available
from worker.kernels.timing import best_ms
from worker.machine.cpu_info import describe
from worker.model.block_linear import BlockLinear, pack_blocks
from worker.model.int4 import Int4Linear
from worker.model.linear import PackedLinear

SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))  # (out, in): qkv, o, gate/up, down
HEAD = (49152, 576)
LAYERS = 30


def attention_ms(rows: int, keys: int = 200, page: int = 16) -> float:
    """30 layers of decode attention, each sequence's `keys` rows on scattered pages."""
    heads, kv_heads, dim = 9, 3, 64  # the default model's
    pages = rows * keys // page + 1
    generator = torch.Generator().manual_seed(0)
    caches = [
        (torch.randn(4 * pages * page, kv_heads, dim), torch.randn(4 * pages * page, kv_heads, dim))
        for _ in range(LAYERS)
    ]
    order = torch.randperm(4 * pages, generator=generator)[: rows * (keys // page + 1)]
    table = order.view(rows, -1)
    positions = torch.arange(keys)
    read_slots = table[:, positions // page] * page + positions % page
    write_slots = read_slots[:, -1].clone()
    last = torch.full((rows,), keys - 1)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * dim, generator=generator)
    cos, sin = torch.randn(keys, dim), torch.randn(keys, dim)

    def step() -> None:
        for k, v in caches:
            torch.ops.astrai.decode_attention(
                qkv, last, cos, sin, k, v, write_slots, read_slots, heads, kv_heads, 0
            )

    return best_ms(step)


def variants(weights: list[torch.Tensor], head: torch.Tensor) -> dict[str, tuple[list, object]]:
    """name → (layer modules, head module)."""
    out: dict[str, tuple[list, object]] = {}
    if native_kernels_available():
        for name, panel_rows in (("q4_1 direct", 0), ("q4_1 panel", 1)):
            layers = [
                BlockLinear(pack_blocks(w, "q4_1"), None, "q4_1", panel_rows) for w in weights
            ]
            out[name] = (layers, BlockLinear(pack_blocks(head, "q8_0"), None, "q8_0", panel_rows))
    out["torch int4 (bf16 activations)"] = (
        [Int4Linear(w, None, float32_copy=False) for w in weights],
        PackedLinear(head, None),
    )
    for layout in ("mm", "linear", "mkldnn"):
        out[f"float32 {layout}"] = (
            [PackedLinear(w, None, float32_layout=layout) for w in weights],
            PackedLinear(head, None, float32_layout=layout),
        )
    return out


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", default="1,8,32", help="comma list of batch sizes")
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    weights = [
        torch.randn(shape, generator=generator) * 0.05 for _ in range(LAYERS) for shape in SHAPES
    ]
    head = torch.randn(HEAD, generator=generator) * 0.05
    print(f"CPU {describe()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| kernel | rows | 120 layer matmuls ms | output layer ms |")
    print("|---|---|---|---|")
    for name, (layers, head_layer) in variants(weights, head).items():
        for rows in (int(r) for r in args.rows.split(",")):
            inputs = {k: torch.randn(rows, k, generator=generator) for k in (576, 1536)}
            layer_ms = best_ms(lambda i=inputs, ls=layers: [m(i[m.in_features]) for m in ls])
            head_ms = best_ms(lambda i=inputs, h=head_layer: h(i[576]))
            print(f"| {name} | {rows} | {layer_ms:.2f} | {head_ms:.2f} |", flush=True)
    if native_kernels_available():
        print("\n| decode attention, 30 layers, 200 keys | rows | ms |\n|---|---|---|")
        for rows in (int(r) for r in args.rows.split(",")):
            print(f"| native | {rows} | {attention_ms(rows):.2f} |", flush=True)


if __name__ == "__main__":
    main()
