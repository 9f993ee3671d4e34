"""Cached k/v rows in their stored form: float rows as they are, or 8-bit blocks (q8_0).

A q8_0 cache stores each head's row of D values as D / 32 blocks laid out as ggml's
`block_q8_0`: a float16 scale d and 32 signed bytes, value = d * code, d = max |x| / 127 of the
block, codes rounded to nearest (ties to even). A row of 64 values is 68 bytes instead of 256:
a quarter of the memory and disk per token, and of the bytes a decode step reads. The tensor
holding such rows is uint8 (slots, KVH, D / 32 * 34); every reader and writer of the cache
goes through `read_rows` and `write_rows`, which see float rows (slots, KVH, D) either way.
"""

from __future__ import annotations

import torch

BLOCK = 32  # values a block holds
BLOCK_BYTES = 34  # a float16 scale, then 32 signed bytes
Q8_0 = torch.uint8  # the storage dtype that marks a q8_0 cache
KV_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "q8_0": Q8_0,
}


def is_quantized(cache: torch.Tensor) -> bool:
    return cache.dtype == Q8_0


def storage_width(head_dim: int, dtype: torch.dtype) -> int:
    """The last dimension of a cache tensor holding rows of `head_dim` values."""
    if dtype != Q8_0:
        return head_dim
    if head_dim % BLOCK:
        raise ValueError(f"a q8_0 KV cache needs head_dim a multiple of {BLOCK}, got {head_dim}")
    return head_dim // BLOCK * BLOCK_BYTES


def bytes_per_value(dtype: torch.dtype) -> float:
    return BLOCK_BYTES / BLOCK if dtype == Q8_0 else float(dtype.itemsize)


def dtype_name(dtype: torch.dtype) -> str:
    return "q8_0" if dtype == Q8_0 else str(dtype).removeprefix("torch.")


def head_dim_of(cache: torch.Tensor) -> int:
    width = cache.shape[-1]
    return width // BLOCK_BYTES * BLOCK if is_quantized(cache) else width


def quantize(x: torch.Tensor) -> torch.Tensor:
    """(..., D) float values as q8_0 blocks, uint8 (..., D / 32 * 34)."""
    blocks = x.float().reshape(*x.shape[:-1], -1, BLOCK)
    d = blocks.abs().amax(dim=-1, keepdim=True) / 127
    inverse = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    codes = torch.round(blocks * inverse).to(torch.int8)
    out = torch.empty(*blocks.shape[:-1], BLOCK_BYTES, dtype=torch.uint8, device=x.device)
    out[..., :2] = d.to(torch.float16).view(torch.uint8)
    out[..., 2:] = codes.view(torch.uint8)
    return out.view(*x.shape[:-1], -1)


def dequantize(rows: torch.Tensor) -> torch.Tensor:
    """q8_0 blocks uint8 (..., D / 32 * 34) as float32 values (..., D)."""
    blocks = rows.reshape(*rows.shape[:-1], -1, BLOCK_BYTES)
    scales = blocks[..., :2].contiguous().view(torch.float16).float()
    codes = blocks[..., 2:].view(torch.int8).float()
    return (codes * scales).reshape(*rows.shape[:-1], -1)


def read_rows(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The rows at `slots` (flat), (len(slots), KVH, D): float32 where the cache is q8_0, in
    the cache's dtype otherwise."""
    rows = cache.index_select(0, slots)
    return dequantize(rows) if is_quantized(cache) else rows


def write_rows(cache: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
    """values (len(slots), KVH, D) into the cache's rows at `slots`, in its stored form."""
    stored = quantize(values) if is_quantized(cache) else values.to(cache.dtype)
    cache.index_copy_(0, slots, stored)
