"""ggml's dot products over GGUF blocks, against the gguf package's own numpy dequantizer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from tests.worker.native import needs_ggml

pytestmark = needs_ggml

# Every type the models issue names; IQ4_NL as one of the importance-matrix family.
TYPES = [
    T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
    T.F16, T.BF16, T.IQ4_NL,
]  # fmt: skip
IN = 512


def ops():
    return torch.ops.astrai_ggml


def quantized(rows: int, kind: T, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, what they hold as float32 by the gguf package's independent dequantizer)."""
    weight = torch.randn(rows, IN, generator=torch.Generator().manual_seed(seed))
    codes = ops().quantize(weight, int(kind))
    values = np.asarray(dequantize(codes.numpy(), kind), dtype=np.float32)
    return codes, torch.from_numpy(values.reshape(rows, IN))


@pytest.mark.parametrize("kind", TYPES, ids=lambda k: k.name)
def test_linear_is_the_dot_product_with_the_dequantized_weights(kind):
    codes, values = quantized(48, kind)
    x = torch.randn(5, IN, generator=torch.Generator().manual_seed(1))

    out = ops().linear(x, [codes], [int(kind)], [48], [0], None)

    reference = x @ values.T
    # The activations are quantized to 8 bits per block (as llama.cpp does): ~1% of the scale.
    tolerance = 2e-3 if kind in (T.F16, T.BF16) else 3e-2
    assert (out - reference).abs().max() <= tolerance * reference.abs().max()
    assert out.shape == (5, 48)


@pytest.mark.parametrize("kind", TYPES, ids=lambda k: k.name)
def test_rows_read_the_blocks_exactly(kind):
    codes, values = quantized(16, kind)
    ids = torch.tensor([3, 0, 3, 15])

    assert torch.equal(ops().rows(codes, int(kind), IN, ids), values[ids])


def test_parts_of_different_types_side_by_side_equal_each_alone():
    q, _ = quantized(32, T.Q4_K, seed=2)
    v, _ = quantized(16, T.Q6_K, seed=3)
    x = torch.randn(3, IN)
    bias = torch.randn(48)

    fused = ops().linear(x, [q, v], [int(T.Q4_K), int(T.Q6_K)], [32, 16], [0, 0], bias)

    alone = torch.cat(
        [
            ops().linear(x, [q], [int(T.Q4_K)], [32], [0], None),
            ops().linear(x, [v], [int(T.Q6_K)], [16], [0], None),
        ],
        dim=1,
    )
    assert torch.equal(fused, alone + bias)


def test_one_row_and_many_rows_give_the_same_numbers():
    codes, _ = quantized(40, T.Q5_K)
    x = torch.randn(9, IN)

    batched = ops().linear(x, [codes], [int(T.Q5_K)], [40], [0], None)

    rows = [ops().linear(x[i : i + 1], [codes], [int(T.Q5_K)], [40], [0], None) for i in range(9)]
    assert torch.equal(batched, torch.cat(rows))


def test_weights_of_the_wrong_width_are_refused_with_the_sizes():
    codes, _ = quantized(8, T.Q4_K)

    with pytest.raises(RuntimeError, match="expected 288"):
        ops().linear(
            torch.randn(1, IN), [codes[:, :-4].contiguous()], [int(T.Q4_K)], [8], [0], None
        )
    with pytest.raises(RuntimeError, match="not a multiple of q4_K's block of 256"):
        ops().linear(torch.randn(1, 300), [codes], [int(T.Q4_K)], [8], [0], None)


def test_an_unknown_type_and_an_out_of_range_row_are_refused():
    codes, _ = quantized(8, T.Q8_0)

    with pytest.raises(RuntimeError, match="unknown ggml type"):
        ops().linear(torch.randn(1, IN), [codes], [999], [8], [0], None)
    with pytest.raises(RuntimeError, match="out of range"):
        ops().rows(codes, int(T.Q8_0), IN, torch.tensor([8]))


def test_the_row_size_is_ggmls():
    assert ops().row_bytes(int(T.Q4_K), 2048) == 8 * 144
    assert ops().row_bytes(int(T.Q8_0), 64) == 2 * 34


WOVEN = [kind for kind in TYPES if ops().can_interleave(int(kind), 64)]


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 9, 32])
@pytest.mark.parametrize("kind", WOVEN, ids=lambda k: k.name)
def test_woven_rows_give_the_plain_rows_numbers(kind, rows):
    """ggml's interleaved gemv (rows 1-3, and past a multiple of 4) and gemm (groups of 4)."""
    codes, _ = quantized(64, kind, seed=4)
    woven = ops().interleave(codes, int(kind), IN)
    x = torch.randn(rows, IN, generator=torch.Generator().manual_seed(rows))

    plain = ops().linear(x, [codes], [int(kind)], [64], [0], None)

    assert woven.shape == codes.shape and not torch.equal(woven, codes)  # rearranged
    torch.testing.assert_close(
        ops().linear(x, [woven], [int(kind)], [64], [1], None), plain, rtol=1e-5, atol=1e-4
    )


def test_woven_and_plain_parts_of_one_layer_side_by_side():
    q, _ = quantized(64, T.Q4_K, seed=5)
    v, _ = quantized(16, T.Q6_K, seed=6)
    x = torch.randn(6, IN)
    woven = [int(ops().can_interleave(int(T.Q4_K), 64)), 0]
    first = ops().interleave(q, int(T.Q4_K), IN) if woven[0] else q

    fused = ops().linear(x, [first, v], [int(T.Q4_K), int(T.Q6_K)], [64, 16], woven, None)

    plain = ops().linear(x, [q, v], [int(T.Q4_K), int(T.Q6_K)], [64, 16], [0, 0], None)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-4)


def test_a_weight_marked_woven_without_an_interleaved_kernel_is_refused():
    codes, _ = quantized(64, T.Q6_K)

    assert not ops().can_interleave(int(T.Q6_K), 64)
    with pytest.raises(RuntimeError, match="no interleaved kernel here"):
        ops().linear(torch.randn(1, IN), [codes], [int(T.Q6_K)], [64], [1], None)
    with pytest.raises(RuntimeError, match="no interleaved kernel here"):
        ops().interleave(codes, int(T.Q6_K), IN)
