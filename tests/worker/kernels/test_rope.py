"""`astrai::rope` against the torch form it replaces (worker.model.rope.apply_rope): the same
bits, for the shapes the models have; bad inputs refused by name."""

from __future__ import annotations

import pytest
import torch

from tests.worker.native import needs_native_kernels
from worker.model.rope import apply_rope

pytestmark = needs_native_kernels

# (rows, heads in a row, heads rotated, head dim): the default model's prompt chunk and decode
# row, wider heads, an odd head size's halves.
SHAPES = [(620, 15, 12, 64), (1, 15, 12, 64), (33, 10, 8, 128), (5, 7, 3, 80), (3, 4, 4, 256)]


@pytest.mark.parametrize(("rows", "width", "heads", "dim"), SHAPES)
def test_the_same_bits_as_torchs_rotate_half(rows: int, width: int, heads: int, dim: int):
    torch.manual_seed(rows * dim)
    qkv = torch.randn(rows, width, dim) * 3
    cos, sin = torch.randn(rows, 1, dim), torch.randn(rows, 1, dim)
    got = torch.ops.astrai.rope(qkv, cos.view(rows, dim), sin.view(rows, dim), heads)
    assert torch.equal(got, apply_rope(qkv[:, :heads], cos, sin))


def test_bad_inputs_are_refused_by_name():
    qkv, table = torch.randn(4, 6, 64), torch.randn(4, 64)
    with pytest.raises(RuntimeError, match="heads within"):
        torch.ops.astrai.rope(qkv, table, table, 7)
    with pytest.raises(RuntimeError, match="cos and sin"):
        torch.ops.astrai.rope(qkv, table[:3], table[:3], 2)
    with pytest.raises(RuntimeError, match="contiguous"):
        torch.ops.astrai.rope(qkv.transpose(0, 1), table, table, 2)
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.astrai.rope(qkv.double(), table, table, 2)
