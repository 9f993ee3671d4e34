"""GgmlLinear and GgmlEmbedding: GGUF tensors in the file's own codes, through ggml's kernels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch
from torch import nn


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

    `panel_rows` (type name → rows, from the kernel plan): a Q4_K part woven so, or a Q6_K
    part, multiplies that many rows or more on our panel kernels instead
    (csrc/kquant_matmul.cpp), reading the same bytes.
    """

    def __init__(
        self,
        parts: Sequence[QuantTensor],
        bias: torch.Tensor | None,
        panel_rows: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__()
        if not parts or len({p.cols for p in parts}) != 1:
            raise ValueError("GgmlLinear needs parts with one common input width")
        ops = torch.ops.astrai_ggml
        self.woven = [int(ops.can_interleave(p.type, p.rows)) for p in parts]
        self.weights = [
            ops.interleave(p.data, p.type, p.cols) if woven else p.data.contiguous()
            for p, woven in zip(parts, self.woven, strict=True)
        ]
        self.types = [p.type for p in parts]
        self.type_names = [p.type_name for p in parts]
        self.part_rows = [p.rows for p in parts]
        self.in_features = parts[0].cols
        self.out_features = sum(self.part_rows)
        self.bias = None if bias is None else bias.detach().float().contiguous()
        self._op = torch.ops.astrai_ggml.linear.default
        # Per part, from how many rows the panel kernel takes it (0: never).
        self.part_panel_rows = [
            _panel_rows(p, woven, panel_rows or {})
            for p, woven in zip(parts, self.woven, strict=True)
        ]
        rows = [r for r in self.part_panel_rows if r]
        self.panel_from = min(rows) if rows else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if self.panel_from and x.shape[0] >= self.panel_from:
            return self._by_parts(x)
        return self._op(x, self.weights, self.types, self.part_rows, self.woven, self.bias)

    def _by_parts(self, x: torch.Tensor) -> torch.Tensor:
        """Each part on the kernel its rows call for, side by side."""
        outs = []
        for i, weight in enumerate(self.weights):
            kind, rows = self.types[i], self.part_rows[i]
            if self.part_panel_rows[i] and x.shape[0] >= self.part_panel_rows[i]:
                outs.append(torch.ops.astrai.kquant_linear(x, weight, kind, rows))
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


def _panel_rows(part: QuantTensor, woven: int, plan: Mapping[str, int]) -> int:
    """Rows from which this part runs on the panel kernels: Q4_K only as ggml wove it."""
    rows = plan.get(part.type_name, 0)
    if part.rows % 8 or part.cols % 256 or (part.type_name == "Q4_K" and not woven):
        return 0
    return rows if part.type_name in ("Q4_K", "Q6_K") else 0


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
