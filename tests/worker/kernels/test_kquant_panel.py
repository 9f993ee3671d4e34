"""The panel kernels on K-quant weights: ggml's own dequantized weights times x, any rows."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as T

from tests.worker.native import needs_ggml, needs_native_kernels
from worker.kernels.kernel_table import KernelTable
from worker.kernels.kquant_probe import (
    gemv_available,
    kquant_kernels_available,
    measure_kquant_rows,
)
from worker.model.ggml_linear import GgmlLinear, QuantTensor

pytestmark = [needs_native_kernels, needs_ggml]

KINDS = [T.Q4_K, T.Q6_K]
# Rows across the micro-kernels' tiles (6, 12, 16, 32) and their remainders; columns in
# whole fours of 8-column tiles and with one or two tiles left over (the paired kernel).
ROWS = [1, 5, 12, 13, 31, 32, 45]
SHAPES = [(64, 512), (40, 256), (72, 768)]


def ggml():
    return torch.ops.astrai_ggml


def quantized(kind: T, out: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(the bytes our kernel reads: Q4_K woven as ggml weaves it, Q6_K as is; the weights
    as ggml's dequantizer makes them, float32)."""
    weight = torch.randn(out, k, generator=torch.Generator().manual_seed(seed))
    codes = ggml().quantize(weight, int(kind))
    values = ggml().rows(codes, int(kind), k, torch.arange(out))
    return (ggml().interleave(codes, int(kind), k) if kind == T.Q4_K else codes), values


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_panel_kernel_is_x_times_the_dequantized_weights(kind, shape):
    weight, values = quantized(kind, *shape)
    for rows in ROWS:
        x = torch.randn(rows, shape[1], generator=torch.Generator().manual_seed(rows))

        out = torch.ops.astrai.kquant_linear(x, weight, int(kind), shape[0])

        reference = (x.double() @ values.double().T).float()
        # float32 sums (AMX: activations to 16 significant bits), the weights exact.
        assert (out - reference).abs().max() <= 2e-5 * reference.abs().max(), (kind, rows)


def test_bad_shapes_are_refused_with_the_reason():
    weight, _ = quantized(T.Q6_K, 16, 256)
    with pytest.raises(RuntimeError, match="multiple of 256"):
        torch.ops.astrai.kquant_linear(
            torch.randn(2, 128), weight[:, :105].contiguous(), int(T.Q6_K), 16
        )
    with pytest.raises(RuntimeError, match=r"Q4_K .* or Q6_K"):
        torch.ops.astrai.kquant_linear(torch.randn(2, 256), weight, int(T.Q8_0), 16)
    with pytest.raises(RuntimeError, match="rows"):
        torch.ops.astrai.kquant_linear(torch.randn(2, 256), weight, int(T.Q6_K), 8)


def _part(kind: T, out: int, k: int, seed: int) -> QuantTensor:
    weight = torch.randn(out, k, generator=torch.Generator().manual_seed(seed))
    return QuantTensor(int(kind), kind.name, ggml().quantize(weight, int(kind)), out, k)


def test_a_fused_layer_takes_the_panel_kernels_from_the_planned_rows_only():
    parts = [_part(T.Q4_K, 32, 512, 1), _part(T.Q6_K, 16, 512, 2), _part(T.Q8_0, 8, 512, 3)]
    bias = torch.randn(56)
    # Without our gemv (ASTRAI_KQUANT_GEMV=0): fewer rows on ggml's kernels.
    plain = GgmlLinear(parts, bias, KernelTable(gemv=False).parts(parts))
    paneled_routes = KernelTable({"Q4_K": 8, "Q6_K": 16}, gemv=False).parts(parts)
    paneled = GgmlLinear(parts, bias, paneled_routes)
    assert paneled.part_panel_rows == [8, 16, 0] and plain.panel_from == 0

    for rows in (4, 8, 20):
        x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(rows))
        values = torch.cat([ggml().rows(p.data, p.type, 512, torch.arange(p.rows)) for p in parts])
        reference = x @ values.T + bias
        out = paneled(x)
        # ggml's kernels round the activations to 8 bits a block; the panels do not.
        assert (out - reference).abs().max() <= 3e-2 * reference.abs().max()
        same_as_ggml = torch.equal(out, plain(x))
        assert same_as_ggml == (rows < 8), rows  # below the plan's rows: ggml's kernel alone


def test_the_probe_names_a_row_count_per_type_and_keeps_its_timings():
    assert kquant_kernels_available()
    measured: dict[str, float] = {}

    rows = measure_kquant_rows(measured)

    assert set(rows) == {"Q4_K", "Q6_K"}
    if gemv_available("Q6_K"):  # Q6_K is grouped for the gemv, which takes every row count
        assert rows.pop("Q6_K") == 0 and not any(k.startswith("Q6_K") for k in measured)
    for name, chosen in rows.items():
        timed = [key for key in measured if key.startswith(f"{name} panel")]
        assert timed, name
        assert chosen == 0 or f"{name} panel {chosen} rows" in measured
