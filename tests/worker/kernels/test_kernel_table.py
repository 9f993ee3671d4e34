"""KernelTable: one place routes each GGUF layer and weight to its kernel, and says so."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T

from tests.worker.native import needs_ggml, needs_native_kernels
from worker.kernels.build import int8_block_kernels_available
from worker.kernels.kernel_table import KernelTable, LayerRoute, PartRoute
from worker.kernels.kquant_probe import gemv_types
from worker.model.ggml_linear import QuantTensor

pytestmark = [needs_native_kernels, needs_ggml]
needs_int8 = pytest.mark.skipif(
    not int8_block_kernels_available(), reason="8-bit block kernels need AVX2"
)


def part(kind: T, out: int = 16, k: int = 256) -> QuantTensor:
    codes = torch.ops.astrai_ggml.quantize(torch.randn(out, k), int(kind))
    return QuantTensor(int(kind), kind.name, codes, out, k)


@needs_int8
def test_layers_go_to_our_block_kernels_where_we_have_them_and_to_ggml_else():
    file, exact = KernelTable(int8_activations=True), KernelTable(int8_activations=False)
    assert file.layer({"Q4_1"}) == LayerRoute("records", "q4_1", int8=True)
    assert exact.layer({"Q8_0"}) == LayerRoute("records", "q8_0", int8=False)
    # The 5-bit kernels take 8-bit activations only: under float32 ones Q5_0 runs as Q8_0
    # codes, Q5_1 on ggml's kernels.
    assert file.layer({"Q5_1"}) == LayerRoute("records", "q5_1", int8=True)
    assert exact.layer({"Q5_0"}) == LayerRoute("q8_0 of q5_0", "q8_0", int8=False)
    assert exact.layer({"Q5_1"}).kind == "ggml"
    assert file.layer({"Q5_0", "Q8_0"}) == LayerRoute("q8_0 of q5_0", "q8_0", int8=True)
    assert file.layer({"Q4_K", "Q6_K"}).kind == "ggml"
    assert file.layer({"Q4_1", "Q8_0"}).kind == "ggml"  # mixed: each part in its own type
    # Q4_0, alone or beside Q5_0, as Q5_0 codes on our Q5_0 kernel; under float32
    # activations, or beside another type, on ggml's.
    assert file.layer({"Q4_0"}) == LayerRoute("q5_0 of q4_0", "q5_0", int8=True)
    assert file.layer({"Q4_0", "Q5_0"}) == LayerRoute("q5_0 of q4_0", "q5_0", int8=True)
    assert exact.layer({"Q4_0"}).kind == "ggml"
    assert file.layer({"Q4_0", "Q5_1"}).kind == "ggml"
    assert file.layer({"Q4_0", "Q8_0"}).kind == "ggml"


def test_k_quant_weights_take_the_gemv_below_the_planned_panel_rows():
    table = KernelTable({"Q4_K": 16, "Q6_K": 32})
    q4k, q6k, q8_0, uneven = part(T.Q4_K), part(T.Q6_K), part(T.Q8_0), part(T.Q4_K, out=12)
    routes = table.parts([q4k, q6k, q8_0, uneven])
    gemv = gemv_types()
    assert routes[0] == PartRoute(woven=True, gemv="Q4_K" in gemv, panel_from=16)
    # Q6_K grouped for the gemv takes it at every row count; on ggml's kernels the panels.
    assert routes[1] == PartRoute(False, "Q6_K" in gemv, 0 if "Q6_K" in gemv else 32)
    assert routes[2] == PartRoute(False, False, 0)
    # 12 rows are not whole groups of 8: ggml cannot weave them, nothing of ours reads them.
    assert routes[3] == PartRoute(False, False, 0)

    without = KernelTable({"Q4_K": 16, "Q6_K": 32}, gemv=False).parts([q4k, q6k])
    assert without == [PartRoute(True, False, 16), PartRoute(False, False, 32)]


def test_what_was_built_is_described_per_type_and_kernel():
    table = KernelTable(int8_activations=True)
    routes = table.parts([part(T.Q4_K), part(T.Q6_K)])
    for kind, route in zip(("Q4_K", "Q6_K"), routes, strict=True):
        table.record(kind, table.part_kernel(route), 3)
    table.record("Q5_0", table.layer_kernel(LayerRoute("q8_0 of q5_0", "q8_0", True), "Q5_0"))
    line = table.describe()
    assert "Q5_0 x1 → native Q8_0 kernel on its codes as Q8_0, 8-bit activations" in line
    kernel = "8-bit gemv (" if "Q4_K" in gemv_types() else "ggml interleaved ("
    assert f"Q4_K x3 → {kernel}" in line and "Q6_K x3 → " in line
