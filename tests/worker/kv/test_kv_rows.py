"""q8_0 rows: ggml's block layout, rounding within half a step, and rows read and written."""

import pytest
import torch

from worker.kv.base import KVStorage
from worker.kv.kv_rows import (
    Q8_0,
    dequantize,
    head_dim_of,
    quantize,
    read_rows,
    storage_width,
    write_rows,
)


def test_a_block_is_a_float16_scale_then_32_codes_as_ggml_lays_out_block_q8_0():
    values = torch.arange(-16, 16, dtype=torch.float32) / 4  # largest magnitude 4.0
    block = quantize(values)
    assert block.shape == (34,) and block.dtype == torch.uint8
    scale = block[:2].view(torch.float16).item()
    assert scale == pytest.approx(4.0 / 127, rel=1e-3)
    codes = block[2:].view(torch.int8)
    assert codes[0].item() == -127  # -4.0: the largest magnitude takes the full range
    assert torch.equal(codes, torch.round(values / (4.0 / 127)).to(torch.int8))


def test_values_come_back_within_half_a_step_of_their_block():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 3, 96, generator=g) * torch.tensor([0.01, 1.0, 300.0])[:, None]
    back = dequantize(quantize(x))
    steps = x.view(7, 3, 3, 32).abs().amax(-1, keepdim=True) / 127
    # Half a step, plus the scale's float16 rounding (2^-11 of it) times the largest code.
    bound = steps * (0.5 + 127 * 2**-11)
    assert ((back - x).view(7, 3, 3, 32).abs() <= bound).all()
    zeros = torch.zeros(2, 64)
    assert torch.equal(dequantize(quantize(zeros)), zeros)  # a zero block: scale 0, no NaN


def test_rows_are_written_and_read_back_through_the_slots():
    storage = KVStorage(1, 4, 4, 2, 64, Q8_0, torch.device("cpu"))
    k, _ = storage.layers[0]
    assert k.shape == (16, 2, 68) and head_dim_of(k) == 64
    assert storage.bytes_reserved == 2 * 16 * 2 * 68
    rows = torch.randn(3, 2, 64)
    slots = torch.tensor([5, 0, 11])
    write_rows(k, slots, rows)
    assert torch.equal(k[slots], quantize(rows))
    torch.testing.assert_close(read_rows(k, slots), dequantize(quantize(rows)))
    assert read_rows(k, torch.tensor([1])).abs().sum() == 0  # unwritten rows read as zeros


def test_float_caches_store_rows_as_they_are():
    cache = torch.zeros(8, 2, 16, dtype=torch.float16)
    rows = torch.randn(2, 2, 16)
    write_rows(cache, torch.tensor([3, 6]), rows)
    assert torch.equal(read_rows(cache, torch.tensor([3, 6])), rows.half())
    assert storage_width(16, torch.float16) == 16 and head_dim_of(cache) == 16


def test_a_head_size_that_is_not_whole_blocks_is_refused_by_name():
    with pytest.raises(ValueError, match="q8_0 KV cache needs head_dim a multiple of 32, got 16"):
        storage_width(16, Q8_0)
