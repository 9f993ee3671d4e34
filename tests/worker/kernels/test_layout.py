"""Block records: the GGUF codes and fp16 scales, 8 columns a tile, exactly as the kernels read."""

import numpy as np
import pytest
import torch

from worker.kernels.layout import (
    GGUF_BLOCK_BYTES,
    Q4_1_RECORD_BYTES,
    Q8_0_RECORD_BYTES,
    TILE,
    pack_q4_1,
    pack_q8_0,
    q8_0_blocks_from_q5_0,
    records_from_gguf,
)


def q4_1_grid(out_features: int, in_features: int, seed: int = 0) -> torch.Tensor:
    """Weights as a Q4_1 file dequantizes them: fp16 d and m, every block using codes 0 and 15."""
    g = torch.Generator().manual_seed(seed)
    blocks = in_features // 32
    codes = torch.randint(0, 16, (out_features, blocks, 32), generator=g)
    codes[..., 3], codes[..., 17] = 0, 15
    d = (torch.rand(out_features, blocks, 1, generator=g) * 0.01 + 1e-3).half().float()
    m = (-8 * d + torch.randn(out_features, blocks, 1, generator=g) * 1e-3).half().float()
    return (codes * d + m).reshape(out_features, in_features)


def q8_0_grid(out_features: int, in_features: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    blocks = in_features // 32
    codes = torch.randint(-127, 128, (out_features, blocks, 32), generator=g)
    codes[..., 5] = 127
    d = (torch.rand(out_features, blocks, 1, generator=g) * 0.01 + 1e-3).half().float()
    return (codes * d).reshape(out_features, in_features)


def unpack_q4_1(records: torch.Tensor, out_features: int) -> torch.Tensor:
    """The weights a record run holds, read back by the layout's definition (slowly)."""
    tiles, blocks, _ = records.shape
    out = torch.zeros(tiles * TILE, blocks * 32)
    for t in range(tiles):
        for b in range(blocks):
            rec = records[t, b]
            d = rec[:16].view(torch.float16).float()
            m = rec[16:32].view(torch.float16).float()
            for c in range(TILE):
                for j in range(4):
                    for i in range(4):
                        byte = int(rec[32 + 32 * j + 4 * c + i])
                        col = t * TILE + c
                        out[col, b * 32 + 4 * j + i] = d[c] * (byte & 15) + m[c]
                        out[col, b * 32 + 16 + 4 * j + i] = d[c] * (byte >> 4) + m[c]
    return out[:out_features]


def unpack_q8_0(records: torch.Tensor, out_features: int) -> torch.Tensor:
    tiles, blocks, _ = records.shape
    out = torch.zeros(tiles * TILE, blocks * 32)
    for t in range(tiles):
        for b in range(blocks):
            rec = records[t, b]
            d = rec[:16].view(torch.float16).float()
            codes = rec[16:].view(torch.int8).reshape(8, TILE, 4).float()  # (group, col, byte)
            for c in range(TILE):
                out[t * TILE + c, b * 32 : (b + 1) * 32] = d[c] * codes[:, c].reshape(32)
    return out[:out_features]


def test_weights_on_the_q4_1_grid_come_back_exactly():
    weight = q4_1_grid(12, 64)
    packed = pack_q4_1(weight)
    assert packed.records.shape == (2, 2, Q4_1_RECORD_BYTES)  # 12 columns pad to 2 tiles
    assert packed.out_features == 12
    assert torch.equal(packed.dequantized, weight)
    assert torch.equal(unpack_q4_1(packed.records, 12), weight)


def test_weights_on_the_q8_0_grid_come_back_exactly():
    weight = q8_0_grid(9, 96, seed=1)
    packed = pack_q8_0(weight)
    assert packed.records.shape == (2, 3, Q8_0_RECORD_BYTES)
    assert torch.equal(packed.dequantized, weight)
    assert torch.equal(unpack_q8_0(packed.records, 9), weight)


def test_other_weights_round_to_the_nearest_codes():
    weight = torch.randn(8, 32)
    q4, q8 = pack_q4_1(weight), pack_q8_0(weight)
    step4 = (weight.amax(1) - weight.amin(1)) / 15
    step8 = weight.abs().amax(1) / 127
    assert ((q4.dequantized - weight).abs() <= step4[:, None] * 0.51 + 1e-3).all()
    assert ((q8.dequantized - weight).abs() <= step8[:, None] * 0.51 + 1e-4).all()
    assert torch.equal(unpack_q4_1(q4.records, 8), q4.dequantized)


def test_padding_columns_hold_zero_weights():
    packed = pack_q4_1(q4_1_grid(3, 32))
    assert torch.equal(unpack_q4_1(packed.records, 8)[3:], torch.zeros(5, 32))


@pytest.mark.parametrize("pack", [pack_q4_1, pack_q8_0])
def test_input_features_must_be_whole_blocks(pack):
    with pytest.raises(ValueError, match="multiple of 32"):
        pack(torch.randn(8, 40))


@pytest.mark.parametrize("block_format", ["q4_1", "q8_0"])
@pytest.mark.parametrize("rows", [8, 13])
def test_records_read_from_a_gguf_tensors_bytes_are_the_packed_records(block_format, rows):
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    kind = GGMLQuantizationType[block_format.upper()]
    weight = torch.randn(rows, 96, generator=torch.Generator().manual_seed(rows)).numpy()
    codes = quantize(weight, kind)  # the gguf package's quantizer: (rows, row bytes)
    values = torch.from_numpy(np.asarray(dequantize(codes, kind), dtype=np.float32))

    read = records_from_gguf(torch.from_numpy(codes), block_format)

    packed = pack_q4_1(values) if block_format == "q4_1" else pack_q8_0(values)
    assert read.out_features == rows
    assert torch.equal(read.records, packed.records)


@pytest.mark.parametrize("block_format", ["q4_1", "q8_0"])
def test_rows_not_laid_out_contiguously_read_as_the_same_records(block_format):
    """A contiguous tensor's blocks move as 16-bit words, any other as bytes: same records."""
    rows = torch.randint(0, 256, (13, 4 * GGUF_BLOCK_BYTES[block_format]), dtype=torch.uint8)
    strided = torch.zeros(13, 2 * rows.shape[1], dtype=torch.uint8)[:, ::2]
    strided.copy_(rows)
    assert not strided.is_contiguous()
    assert torch.equal(
        records_from_gguf(rows, block_format).records,
        records_from_gguf(strided, block_format).records,
    )


def test_gguf_rows_of_the_wrong_width_are_refused():
    with pytest.raises(ValueError, match="q4_1 rows must be uint8"):
        records_from_gguf(torch.zeros(8, 21, dtype=torch.uint8), "q4_1")


def test_q5_0_blocks_become_q8_0_blocks_of_the_same_values():
    """Every value of the Q5_0 file (its fp16 d times code - 16) is the Q8_0 block's value,
    bit for bit, over random weights and the extremes of the 5-bit range."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    rng = np.random.default_rng(7)
    weight = rng.standard_normal((24, 96)).astype(np.float32)
    weight[0, :32] = np.linspace(-1, 1, 32)  # codes from 0 to 31 in one block
    q5 = quantize(weight, GGMLQuantizationType.Q5_0)
    q8 = q8_0_blocks_from_q5_0(torch.from_numpy(q5))
    assert q8.shape == (24, 3 * 34)
    expected = dequantize(q5, GGMLQuantizationType.Q5_0)
    assert np.array_equal(dequantize(q8.numpy(), GGMLQuantizationType.Q8_0), expected)
    codes = q8.view(24, 3, 34)[0, 0, 2:].view(torch.int8)
    assert codes.min() == -16 and codes.max() == 15
    with pytest.raises(ValueError, match="q5_0 rows"):
        q8_0_blocks_from_q5_0(torch.zeros(2, 21, dtype=torch.uint8))
