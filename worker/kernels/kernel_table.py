"""KernelTable: which kernel multiplies each of a GGUF's linear layers, and each weight in it at
each row count, on this CPU; decided in one place and asked by the loader for every layer.

What can run is a fact of the build (worker/kernels/build.py, ggml_build.py: which libraries
and instruction sets); what runs fastest where both can is the probe's (worker/kernels/plan.py:
from how many rows the K-quant panels beat the gemv); the precision decides the activations.
The loader asks `layer` which kind of layer a group of tensors becomes and `parts` how each of
a ggml-kernel layer's weights is multiplied, and `record`s what it built; `describe` is the
startup line's `weights by type` (and /stats' `workers[].kernels`), one entry per type and
kernel with its tensor count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from worker.kernels.build import int8_block_kernels_available, native_kernels_available
from worker.kernels.ggml_build import ggml_isa, ggml_kernels_available
from worker.kernels.kquant_probe import gemv_isa, gemv_types, tiles_available

# Our own block kernels take these GGUF types at any precision; the 5-bit ones with 8-bit
# activations only (worker/kernels/csrc/q5_kernel.h).
NATIVE_TYPES = {"Q4_1": "q4_1", "Q8_0": "q8_0"}
FIVE_BIT_TYPES = {"Q5_0": "q5_0", "Q5_1": "q5_1"}
# The types our gemv reads (csrc/kquant_gemv.h) and how: Q4_K as ggml weaves it ("ggml"),
# Q5_K woven likewise at load by us ("ours", csrc/kquant_q5k_woven.h: rows in eights), Q6_K
# grouped at load (csrc/kquant_q6k_grouped.h, any rows).
GEMV_TYPES = {"Q4_K": "ggml", "Q5_K": "ours", "Q6_K": "grouped"}
KQUANT_PANEL_TYPES = ("Q4_K", "Q6_K")  # the panel kernels' (csrc/kquant_matmul.cpp)
# The gemv types the tile unit also takes, in the gemv's arithmetic (csrc/kquant_tiles.h), 16
# columns a tile; each from the rows the probe found for the type named (Q5_K is woven as
# Q4_K is).
TILE_TYPES = {"Q4_K": "Q4_K", "Q5_K": "Q4_K", "Q6_K": "Q6_K"}
TILE_COLUMNS = 16


class Weight(Protocol):
    """What the table reads of a GGUF tensor (worker.model.ggml_linear.QuantTensor)."""

    @property
    def type(self) -> int: ...
    @property
    def type_name(self) -> str: ...
    @property
    def rows(self) -> int: ...
    @property
    def cols(self) -> int: ...


@dataclass(frozen=True)
class LayerRoute:
    """What a group of tensors (a fused layer) becomes: `kind` "records" (our block kernels
    on `block_format` records, 8-bit activations where `int8`), "q8_0 of q5_0" (Q5_0 parts
    beside Q8_0 ones, or under float32 activations, on the Q8_0 kernel over their codes),
    "q5_0 of q4_0" (Q4_0, alone or beside Q5_0, under 8-bit activations on the Q5_0 kernel,
    its codes plus 8) or
    "ggml" (each weight as `parts` routes it)."""

    kind: str
    block_format: str = ""
    int8: bool = False

    @property
    def activations(self) -> str:
        return "8-bit" if self.int8 else "float32"


@dataclass(frozen=True)
class PartRoute:
    """How one weight of a ggml-kernel layer is multiplied: woven by ggml's repack (its
    interleaved kernels; our gemv and panels read those bytes), rows below `panel_from` on our
    8-bit gemv where `gemv` (else ggml's kernel; Q5_K and Q6_K rearranged for it at load),
    from `tiles_from` rows on the gemv's arithmetic on the tile unit, from `panel_from` rows
    on our panel kernels (0: never)."""

    woven: bool
    gemv: bool
    panel_from: int
    tiles_from: int = 0


class KernelTable:
    """The routes of one model on this CPU (module docstring). `gemv=False` keeps the
    K-quants on ggml's kernels (and the panels), as ASTRAI_KQUANT_GEMV=0 does."""

    def __init__(
        self,
        kquant_panel_rows: Mapping[str, int] | None = None,
        int8_activations: bool = False,
        gemv: bool = True,
        tiles_rows: Mapping[str, int] | None = None,
    ) -> None:
        self.kquant_panel_rows = dict(kquant_panel_rows or {})
        self.native = native_kernels_available()
        self.ggml = ggml_kernels_available()
        # Precision file where our block kernels lack 8-bit activations (no AVX2): ggml's
        # kernels compute the file's arithmetic instead, where they are here; else ours in
        # float32.
        self.int8 = int8_activations and int8_block_kernels_available()
        self.ours = self.native and (self.int8 == int8_activations or not self.ggml)
        self.gemv_types = gemv_types() if gemv else frozenset()
        # From how many rows the tile unit takes each gemv type (the probe's; absent: never).
        on_tiles = bool(self.gemv_types) and tiles_available()
        self.tiles_rows = dict(tiles_rows or {}) if on_tiles else {}
        self.built: Counter[tuple[str, str]] = Counter()

    def layer(self, kinds: Collection[str]) -> LayerRoute:
        """The kind of layer tensors of these quantized types become together."""
        kind = next(iter(kinds)) if len(kinds) == 1 else ""
        if self.ours and (kind in NATIVE_TYPES or (kind in FIVE_BIT_TYPES and self.int8)):
            formats = NATIVE_TYPES | FIVE_BIT_TYPES
            return LayerRoute("records", formats[kind], self.int8)
        if self.ours and self.int8 and "Q4_0" in kinds and set(kinds) <= {"Q4_0", "Q5_0"}:
            # ggml's Q4_0 kernels run at ~2/3 our Q5_0 records' rate (its Q5_0 ones, beside
            # them in llama-quantize's Q3_K_M, at half); Q4_0's values as Q5_0 codes (22 bytes
            # a block, not 18) compute the same integer dot products there.
            return LayerRoute("q5_0 of q4_0", "q5_0", True)
        if self.ours and set(kinds) <= {"Q5_0", "Q8_0"}:
            # ggml's Q5_0 kernels take a call per row block and run at half our Q8_0 records'
            # rate; the same values as Q8_0 codes (34 bytes a block, not 22) compute the same
            # integer dot products there.
            return LayerRoute("q8_0 of q5_0", "q8_0", self.int8)
        return LayerRoute("ggml")

    def parts(self, weights: Sequence[Weight]) -> list[PartRoute]:
        """Each weight of a ggml-kernel layer's route (`layer` said "ggml")."""
        routes = []
        for weight in weights:
            woven = bool(torch.ops.astrai_ggml.can_interleave(weight.type, weight.rows))
            name = weight.type_name
            gemv = (
                name in self.gemv_types
                and {
                    "ggml": woven,
                    "ours": weight.rows % 8 == 0,
                    "grouped": True,
                }[GEMV_TYPES[name]]
            )
            tiles = gemv and name in TILE_TYPES and weight.rows % TILE_COLUMNS == 0
            routes.append(
                PartRoute(
                    woven,
                    gemv,
                    self._panel_from(weight, woven, gemv),
                    self.tiles_rows.get(TILE_TYPES[name], 0) if tiles else 0,
                )
            )
        return routes

    def _panel_from(self, weight: Weight, woven: bool, gemv: bool) -> int:
        """Rows from which the weight runs on the panel kernels: Q4_K only as ggml wove it,
        Q6_K only where it is not grouped for our gemv (which takes it at every row count)."""
        name = weight.type_name
        if name not in KQUANT_PANEL_TYPES or weight.rows % 8 or weight.cols % 256:
            return 0
        if (name == "Q4_K" and not woven) or (name == "Q6_K" and gemv):
            return 0
        return self.kquant_panel_rows.get(name, 0)

    def part_kernel(self, route: PartRoute) -> str:
        """The startup line's words for one weight's route."""
        if route.gemv:
            kernel = f"8-bit gemv ({gemv_isa()})"
            if route.tiles_from:
                kernel += f", AMX tiles from {route.tiles_from} rows"
        else:
            kernel = f"ggml {'interleaved' if route.woven else 'vec_dot'} ({ggml_isa()})"
        return (
            f"{kernel}, panel kernel from {route.panel_from} rows" if route.panel_from else kernel
        )

    def layer_kernel(self, route: LayerRoute, type_name: str) -> str:
        """The startup line's words for a records layer's part of type `type_name`."""
        if route.kind == "q8_0 of q5_0":
            codes = " on its codes as Q8_0" if type_name == "Q5_0" else ""
            return f"native Q8_0 kernel{codes}, {route.activations} activations"
        if route.kind == "q5_0 of q4_0":
            codes = " on its codes as Q5_0" if type_name == "Q4_0" else ""
            return f"native Q5_0 kernel{codes}, 8-bit activations"
        return f"native {type_name} kernel, {route.activations} activations"

    def record(self, type_name: str, kernel: str, tensors: int = 1) -> None:
        """What the loader built: `tensors` of `type_name` on `kernel`."""
        self.built[(type_name, kernel)] += tensors

    def describe(self) -> str:
        return ", ".join(
            f"{kind} x{count} → {kernel}" for (kind, kernel), count in sorted(self.built.items())
        )
