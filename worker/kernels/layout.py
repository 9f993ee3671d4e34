"""Weight records for the native block kernels: GGUF's Q4_1, Q8_0, Q5_0 and Q5_1 codes by tile.

csrc/quant_matmul.cpp documents the byte layout. Quantizing weights a Q4_1 (or Q8_0) file
dequantized gives that file's codes and fp16 scales back exactly, so the kernels compute
with the very numbers the file holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

BLOCK = 32
TILE = 8  # output features per record
Q4_1_RECORD_BYTES = 160
Q8_0_RECORD_BYTES = 272


class BlockWeights(NamedTuple):
    records: torch.Tensor  # (tiles, blocks, record bytes) uint8
    out_features: int
    dequantized: torch.Tensor  # (out, in) float32: what the records hold, for checks


def check_shape(weight: torch.Tensor) -> None:
    if weight.dim() != 2 or weight.shape[1] % BLOCK:
        raise ValueError(
            f"block weights need (out, in) with in a multiple of {BLOCK}, got {tuple(weight.shape)}"
        )


def _tiled(t: torch.Tensor) -> torch.Tensor:
    """(out, ...) → (tiles, TILE, ...), padding out to whole tiles with zeros."""
    pad = -t.shape[0] % TILE
    if pad:
        t = torch.cat([t, t.new_zeros((pad, *t.shape[1:]))])
    return t.reshape(-1, TILE, *t.shape[1:])


def _halves_by_tile(values: torch.Tensor) -> torch.Tensor:
    """(out, blocks) fp16 → (tiles, blocks, 2 * TILE) bytes: each block's 8 columns' values."""
    return _tiled(values).permute(0, 2, 1).contiguous().view(torch.uint8)


def pack_q4_1(weight: torch.Tensor) -> BlockWeights:
    """Per block of 32 inputs: d = (max - min) / 15 and m = min in fp16, codes 0..15."""
    check_shape(weight)
    out_features, in_features = weight.shape
    blocks = in_features // BLOCK
    groups = weight.detach().float().reshape(out_features, blocks, BLOCK)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    d, m = ((high - low) / 15).half(), low.half()
    step = d.float().clamp_min(torch.finfo(torch.float16).tiny)
    codes = ((groups - m.float()[..., None]) / step[..., None]).round_().clamp_(0, 15)
    dequantized = codes * d.float()[..., None] + m.float()[..., None]
    # (tiles, 8 cols, blocks, half h, group j, byte i): code 16h + 4j + i of each block.
    c = _tiled(codes.to(torch.uint8)).reshape(-1, TILE, blocks, 2, 4, 4)
    nibbles = c[:, :, :, 0] | (c[:, :, :, 1] << 4)  # (tiles, cols, blocks, j, i)
    code_bytes = nibbles.permute(0, 2, 3, 1, 4).reshape(-1, blocks, 4 * TILE * 4)
    records = torch.cat([_halves_by_tile(d), _halves_by_tile(m), code_bytes], dim=-1)
    return BlockWeights(
        records.contiguous(), out_features, dequantized.reshape(out_features, in_features)
    )


def pack_q8_0(weight: torch.Tensor) -> BlockWeights:
    """Per block of 32 inputs: d = max |w| / 127 in fp16, codes -127..127."""
    check_shape(weight)
    out_features, in_features = weight.shape
    blocks = in_features // BLOCK
    groups = weight.detach().float().reshape(out_features, blocks, BLOCK)
    d = (groups.abs().amax(dim=-1) / 127).half()
    step = d.float().clamp_min(torch.finfo(torch.float16).tiny)
    codes = (groups / step[..., None]).round_().clamp_(-127, 127)
    dequantized = codes * d.float()[..., None]
    # (tiles, 8 cols, blocks, group g, byte i) → per block: group-major, then column.
    c = _tiled(codes.to(torch.int8)).reshape(-1, TILE, blocks, 8, 4)
    code_bytes = c.permute(0, 2, 3, 1, 4).reshape(-1, blocks, 8 * TILE * 4).view(torch.uint8)
    records = torch.cat([_halves_by_tile(d), code_bytes], dim=-1)
    return BlockWeights(
        records.contiguous(), out_features, dequantized.reshape(out_features, in_features)
    )


class BlockRecords(NamedTuple):
    """Records read straight from a GGUF file's blocks, with nothing dequantized."""

    records: torch.Tensor  # (tiles, blocks, record bytes) uint8
    out_features: int


# GGUF's block of 32 values: fp16 d (and fp16 m for Q4_1, 32 high bits for Q5_0) followed by
# the codes; the fields before the codes, in bytes, each moved column by column into a record.
GGUF_BLOCK_BYTES = {"q4_1": 20, "q8_0": 34, "q5_0": 22, "q5_1": 24}
_HEADER_FIELDS = {"q4_1": (2, 2), "q8_0": (2,), "q5_0": (2, 4), "q5_1": (2, 2, 4)}
# The 5-bit types: where a block's 32 high bits start (after fp16 d, and m for Q5_1).
HIGH_BITS_AT = {"q5_0": 2, "q5_1": 4}


def five_bit_codes(blocks: torch.Tensor, block_format: str) -> torch.Tensor:
    """(..., block bytes) uint8 blocks of a 5-bit type, as the file holds them → (..., 32)
    int16 codes 0..31 (value i: bit i of the high bits over the nibble of byte i % 16)."""
    at = HIGH_BITS_AT[block_format]
    high_bits = blocks[..., at : at + 4].to(torch.int64)  # little-endian: bit i for value i
    high = high_bits[..., 0] | high_bits[..., 1] << 8 | high_bits[..., 2] << 16
    high = high | high_bits[..., 3] << 24
    low = blocks[..., at + 4 :].to(torch.int16)  # value i: low nibble; i + 16: high nibble
    nibbles = torch.cat([low & 0x0F, low >> 4], dim=-1)
    bit = (high[..., None] >> torch.arange(32)) & 1
    return nibbles | (bit << 4).to(torch.int16)


def q8_0_blocks_from_q5_0(raw: torch.Tensor) -> torch.Tensor:
    """Q5_0 rows (out, blocks x 22) as Q8_0 rows (out, blocks x 34) holding the same values:
    each 5-bit code q becomes the byte q - 16 beside the same fp16 d, so ggml's Q5_0 x Q8_0
    dot product (integer products of q - 16 and the 8-bit activations, times d) is exactly
    what the Q8_0 records compute."""
    size = GGUF_BLOCK_BYTES["q5_0"]
    if raw.dtype != torch.uint8 or raw.dim() != 2 or raw.shape[1] % size:
        raise ValueError(f"q5_0 rows must be uint8 (out, k x {size})")
    out_features = raw.shape[0]
    blocks = raw.view(out_features, -1, size)
    codes = five_bit_codes(blocks, "q5_0") - 16
    q8 = torch.cat([blocks[..., 0:2], codes.to(torch.int8).view(torch.uint8)], dim=-1)
    return q8.reshape(out_features, -1).contiguous()


def q5_0_blocks_from_q4_0(raw: torch.Tensor) -> torch.Tensor:
    """Q4_0 rows (out, blocks x 18) as Q5_0 rows (out, blocks x 22) holding the same values:
    each 4-bit code q becomes the 5-bit code q + 8 beside the same fp16 d, so ggml's Q4_0 x
    Q8_0 dot product (integer products of q - 8 and the 8-bit activations, times d) is
    exactly what the Q5_0 records compute ((q + 8) - 16)."""
    if raw.dtype != torch.uint8 or raw.dim() != 2 or raw.shape[1] % 18:
        raise ValueError("q4_0 rows must be uint8 (out, k x 18)")
    out_features = raw.shape[0]
    blocks = raw.view(out_features, -1, 18)
    nibbles = blocks[..., 2:].to(torch.int32)  # byte i: value i low, value i + 16 high
    codes = torch.cat([nibbles & 0x0F, nibbles >> 4], dim=-1) + 8  # (out, blocks, 32)
    bits = (codes >> 4).to(torch.int64) << torch.arange(32)
    high = bits.sum(dim=-1)  # bit i: value i's fifth bit
    high_bytes = torch.stack([(high >> (8 * b)) & 0xFF for b in range(4)], dim=-1)
    low = codes & 0x0F
    packed = low[..., :16] | (low[..., 16:] << 4)
    q5 = torch.cat([blocks[..., 0:2], high_bytes.to(torch.uint8), packed.to(torch.uint8)], dim=-1)
    return q5.reshape(out_features, -1).contiguous()


def records_from_gguf(raw: torch.Tensor, block_format: str) -> BlockRecords:
    """A GGUF tensor's rows (out, blocks x block bytes) as records, byte for byte.

    Q4_1's, Q5_0's and Q5_1's 16 code bytes hold values k and k + 16 in the low and high
    nibble of byte k, which is the records' order already (the 5-bit types' 32 high bits move
    as one word per column, their bits reordered); Q8_0's 32 codes are one byte each.
    """
    block_bytes = GGUF_BLOCK_BYTES[block_format]
    if raw.dtype != torch.uint8 or raw.dim() != 2 or raw.shape[1] % block_bytes:
        raise ValueError(f"{block_format} rows must be uint8 (out, k x {block_bytes})")
    records = _rearranged(raw, block_format)
    if block_format in HIGH_BITS_AT:
        at = HIGH_BITS_AT[block_format] * TILE
        high = records[..., at : at + 4 * TILE].view(torch.int32)
        high.copy_(_moved_bits(high, _RECORD_HIGH_BITS))
    return BlockRecords(records, raw.shape[0])


def _bit_moves(position: Callable[[int], int]) -> torch.Tensor:
    """(4, 256) int64: for byte b of a 32-bit word and its value v, v's bits at their new
    places (bit i of the word to bit position(i))."""
    table = torch.zeros(4, 256, dtype=torch.int64)
    values = torch.arange(256)
    for b in range(4):
        for u in range(8):
            table[b] |= ((values >> u) & 1) << position(8 * b + u)
    return table


# A 5-bit type's high bits: the file's bit i (code i) at bit 8 (i % 4) + i // 4 of a record's
# word, where one shift lines up a group of four codes' bits with their bytes
# (csrc/q5_kernel.h); and back.
_RECORD_HIGH_BITS = _bit_moves(lambda i: 8 * (i % 4) + i // 4)
_FILE_HIGH_BITS = _bit_moves(lambda p: 4 * (p % 8) + p // 8)


def _moved_bits(words: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """int32 words with their bits moved by a _bit_moves table."""
    wide = words.to(torch.int64) & 0xFFFFFFFF
    moved = torch.zeros_like(wide)
    for b in range(4):
        moved |= table[b][(wide >> (8 * b)) & 0xFF]
    return moved.to(torch.int32)  # wraps bit 31 into the sign, as the bytes hold it


def five_bit_rows_from_records(rows: torch.Tensor, block_format: str) -> torch.Tensor:
    """Q5_0 / Q5_1 rows (out, blocks x block bytes) gathered back out of records
    (gguf_rows_in_records): the file's bytes again, high bits in the file's order."""
    at = HIGH_BITS_AT[block_format]
    blocks = rows.reshape(rows.shape[0], -1, GGUF_BLOCK_BYTES[block_format]).clone()
    high = blocks[..., at : at + 4].contiguous().view(torch.int32)
    blocks[..., at : at + 4] = _moved_bits(high, _FILE_HIGH_BITS).view(torch.uint8)
    return blocks.reshape(rows.shape)


def gguf_rows_in_records(block_format: str, blocks: int) -> torch.Tensor:
    """(TILE, blocks x block bytes) int64: where each byte of a tile's rows, in the GGUF
    file's order, lies among that tile's record bytes (records_from_gguf's move, inverted):
    the rows of a table held only as records, read back as the file held them."""
    row_bytes = blocks * GGUF_BLOCK_BYTES[block_format]
    source = _rearranged(torch.arange(TILE * row_bytes).view(TILE, row_bytes), block_format)
    where = torch.empty(TILE * row_bytes, dtype=torch.int64)
    where[source.flatten()] = torch.arange(TILE * row_bytes)
    return where.view(TILE, row_bytes)


def _rearranged(raw: torch.Tensor, block_format: str) -> torch.Tensor:
    """GGUF rows (out, blocks x block bytes) of any dtype → (tiles, blocks, record bytes)."""
    if raw.dtype == torch.uint8 and raw.is_contiguous():
        # Every field of a block is whole 16-bit words: moved as words, half the elements
        # (the load's largest copy).
        words = _rearranged_units(raw.view(torch.int16), block_format, 2)
        return words.view(torch.uint8)
    return _rearranged_units(raw, block_format, 1)


def _rearranged_units(raw: torch.Tensor, block_format: str, unit: int) -> torch.Tensor:
    """_rearranged over elements of `unit` bytes each (1 or 2)."""
    block = GGUF_BLOCK_BYTES[block_format] // unit
    out_features = raw.shape[0]
    blocks = raw.shape[1] // block
    tiles = _tiled(raw.reshape(out_features, blocks, block))  # (tiles, 8, blocks, block)
    fields, at = [], 0
    for size in _HEADER_FIELDS[block_format]:
        width = size // unit
        field = tiles[..., at : at + width].permute(0, 2, 1, 3)
        fields.append(field.reshape(-1, blocks, width * TILE))
        at += width
    codes = tiles[..., at:]
    group = 4 // unit  # the records interleave the tile's columns 4 code bytes at a time
    groups = codes.shape[-1] // group  # Q4_1, Q5_0: 4 groups; Q8_0: 8
    codes = codes.reshape(-1, TILE, blocks, groups, group).permute(0, 2, 3, 1, 4)
    records = torch.cat([*fields, codes.reshape(-1, blocks, groups * TILE * group)], dim=-1)
    return records.contiguous()
