"""GgmlLinear and GgmlEmbedding: GGUF tensors in the file's own codes, through ggml's kernels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeGuard

import torch
from torch import nn

from worker.kernels.kernel_table import PartRoute


class QuantTensor(NamedTuple):
    """A GGUF tensor as the file holds it: `data` (rows, row bytes) uint8 in ggml `type`."""

    type: int  # a gguf.GGMLQuantizationType value
    type_name: str
    data: torch.Tensor
    rows: int
    cols: int

    def take_rows(self, index: torch.Tensor) -> QuantTensor:
        """These rows, in this order: each row is whole blocks, so rows move freely."""
        return self._replace(data=self.data.index_select(0, index), rows=int(index.numel()))


class GgmlLinear(nn.Module):
    """x (N, in) float32 times one or more GGUF weights side by side → (N, Σ out) float32.

    Several parts make a fused layer (q, k and v; gate and up) whose tensors a file may hold
    in different types (Q4_K_M keeps some v and down projections in Q6_K): each part is
    multiplied in its own type, the activations quantized once per dot-product format.
    A part whose type ggml's CPU backend interleaves on this CPU (Q4_0, Q4_K, IQ4_NL with
    AVX2, Q2_K with AVX-512: eight rows woven block by block, as llama.cpp serves them) is
    woven once here by ggml's own repack code and multiplied by its gemv/gemm kernels; the
    others one dot product per output (`vec_dot`).

    `routes` (worker/kernels/kernel_table.py decides them, one per part): a part woven so is
    woven once here; a part on our gemv (csrc/kquant_gemv.h: ggml's arithmetic, the weights
    streamed ahead of it) takes its rows below its `panel_from` there (Q6_K grouped once here
    for it, csrc/kquant_q6k_grouped.h; Q5_K woven, csrc/kquant_q5k_woven.h), side by side with
    the layer's other gemv parts of its type as one weight; from `panel_from` rows on, our
    panel kernels (csrc/kquant_matmul.cpp), reading the same bytes.
    """

    def __init__(
        self, parts: Sequence[QuantTensor], bias: torch.Tensor | None, routes: Sequence[PartRoute]
    ) -> None:
        super().__init__()
        if not parts or len({p.cols for p in parts}) != 1 or len(routes) != len(parts):
            raise ValueError("GgmlLinear needs parts with one common input width, a route each")
        self.routes = list(routes)
        self.woven = [int(r.woven) for r in routes]
        self.on_gemv = [r.gemv for r in routes]
        self.tiles_from = [r.tiles_from for r in routes]
        weights = [_kernel_layout(p, r) for p, r in zip(parts, routes, strict=True)]
        self.segments, self.weights = _segments(
            weights, [p.type for p in parts], self.on_gemv, self.tiles_from
        )
        self.types = [p.type for p in parts]
        self.type_names = [p.type_name for p in parts]
        self.part_rows = [p.rows for p in parts]
        self.in_features = parts[0].cols
        self.out_features = sum(self.part_rows)
        self.bias = None if bias is None else bias.detach().float().contiguous()
        self._op = torch.ops.astrai_ggml.linear.default
        # Per part, from how many rows the panel kernel takes it (0: never).
        self.part_panel_rows = [r.panel_from for r in routes]
        rows = [r for r in self.part_panel_rows if r]
        self.panel_from = min(rows) if rows else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if self.panel_from and x.shape[0] >= self.panel_from:
            return self._by_parts(x)
        if len(self.segments) == 1 and not self.segments[0].gemv:
            return self._op(x, self.weights, self.types, self.part_rows, self.woven, self.bias)
        outs = []
        for segment in self.segments:
            first, last = segment.parts
            if segment.gemv:
                outs.append(_gemv(x, segment.weight, segment.type, segment.tiles_from))
            else:
                outs.append(
                    self._op(
                        x,
                        self.weights[first:last],
                        self.types[first:last],
                        self.part_rows[first:last],
                        self.woven[first:last],
                        None,
                    )
                )
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
        return out if self.bias is None else out.add_(self.bias)

    def _by_parts(self, x: torch.Tensor) -> torch.Tensor:
        """Each part on the kernel its rows call for, side by side."""
        outs = []
        for i, weight in enumerate(self.weights):
            kind, rows = self.types[i], self.part_rows[i]
            if self.part_panel_rows[i] and x.shape[0] >= self.part_panel_rows[i]:
                outs.append(torch.ops.astrai.kquant_linear(x, weight, kind, rows))
            elif self.on_gemv[i]:
                outs.append(_gemv(x, weight, kind, self.tiles_from[i]))
            else:
                outs.append(self._op(x, [weight], [kind], [rows], [self.woven[i]], None))
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
        return out if self.bias is None else out.add_(self.bias)

    def extra_repr(self) -> str:
        kinds = "+".join(
            f"{name} woven" if woven else name
            for name, woven in zip(self.type_names, self.woven, strict=True)
        )
        return f"in={self.in_features}, out={self.out_features}, kind=ggml {kinds}"


def _gemv(x: torch.Tensor, weight: torch.Tensor, kind: int, tiles_from: int) -> torch.Tensor:
    """x times a weight laid out for the gemv: on the tile unit from `tiles_from` rows (the
    same arithmetic, csrc/kquant_tiles.h), else on the gemv."""
    if tiles_from and x.shape[0] >= tiles_from:
        return torch.ops.astrai.kquant_tiles(x, weight, kind, weight.shape[0])
    return torch.ops.astrai.kquant_gemv(x, weight, kind, weight.shape[0])


class Segment(NamedTuple):
    """Parts [first, last) of a layer; those `gemv` takes (all of type `type`, the tile unit
    from `tiles_from` rows) side by side in one weight."""

    parts: tuple[int, int]
    gemv: bool
    type: int
    weight: torch.Tensor
    tiles_from: int = 0


def _kernel_layout(part: QuantTensor, route: PartRoute) -> torch.Tensor:
    """The part's bytes as its kernel reads them: woven by ggml's repack, Q6_K grouped and
    Q5_K woven for our gemv (the same bits rearranged, at every row count: Q6_K's panels have
    no tile-unit path, and their float32 products do a quarter of an 8-bit dot product's
    work per instruction; Q5_K has no panels), else as the file holds them."""
    if route.woven:
        return torch.ops.astrai_ggml.interleave(part.data, part.type, part.cols)
    if route.gemv and part.type_name == "Q6_K":
        return torch.ops.astrai.kquant_q6k_group(part.data)
    if route.gemv and part.type_name == "Q5_K":
        return torch.ops.astrai.kquant_q5k_weave(part.data)
    return part.data.contiguous()


def _segments(
    weights: list[torch.Tensor], types: list[int], on_gemv: list[bool], tiles_from: list[int]
) -> tuple[list[Segment], list[torch.Tensor]]:
    """Runs of parts alike (on ggml's kernels, or on the gemv in one type); a gemv run's
    weights as one tensor (rows stack, woven groups of 8 too), each part then a view of it,
    so nothing is held twice."""
    keys = [
        (gemv, kind if gemv else -1, tiles)
        for gemv, kind, tiles in zip(on_gemv, types, tiles_from, strict=True)
    ]
    segments: list[Segment] = []
    first = 0
    for i in range(1, len(weights) + 1):
        if i < len(weights) and keys[i] == keys[first]:
            continue
        run = weights[first:i]
        merged = on_gemv[first] and len(run) > 1
        weight = torch.cat(run) if merged else run[0]
        segments.append(
            Segment((first, i), on_gemv[first], types[first], weight, tiles_from[first])
        )
        if merged:
            weights[first:i] = list(torch.split(weight, [w.shape[0] for w in run]))
        first = i
    return segments, weights


class GgmlEmbedding(nn.Module):
    """Rows of a GGUF token embedding in its own codes, read out as float32 per lookup."""

    def __init__(self, table: QuantTensor) -> None:
        super().__init__()
        self.table = table
        self.num_embeddings = table.rows
        self.embedding_dim = table.cols
        self._op = torch.ops.astrai_ggml.rows.default

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = self._op(self.table.data, self.table.type, self.table.cols, ids.reshape(-1))
        return flat.view(*ids.shape, self.table.cols)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, kind=ggml {self.table.type_name}"


class GroupedQ6KEmbedding(nn.Module):
    """A tied Q6_K token embedding read from the output layer's grouped copy (one copy of the
    table: the file's pages are not mapped again row by row)."""

    def __init__(self, head: GgmlLinear) -> None:
        super().__init__()
        self.weight_bytes = head.weights[0]
        self.num_embeddings = head.out_features
        self.embedding_dim = head.in_features
        self._op = torch.ops.astrai.kquant_q6k_grouped_rows.default

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = self._op(self.weight_bytes, ids.reshape(-1), self.embedding_dim)
        return flat.view(*ids.shape, self.embedding_dim)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, kind=Q6_K grouped (the head's)"


def grouped_q6k_head(layer: nn.Module) -> TypeGuard[GgmlLinear]:
    """Whether `layer` is one Q6_K part grouped for our gemv (a tied embedding reads it)."""
    return (
        isinstance(layer, GgmlLinear)
        and len(layer.type_names) == 1
        and layer.type_names[0] == "Q6_K"
        and layer.on_gemv[0]
    )
