"""Token embeddings over a table held elsewhere: the output layer's records, the mapped file."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from worker.kernels.layout import (
    BLOCK,
    GGUF_BLOCK_BYTES,
    HIGH_BITS_AT,
    TILE,
    five_bit_codes,
    five_bit_rows_from_records,
    gguf_rows_in_records,
)


class RecordsEmbedding(nn.Module):
    """A tied table held once: the output layer's records (tiles, blocks, record bytes) are
    the only copy, and each looked-up row is gathered back into the file's blocks and
    dequantized as ggml does (d x q for Q8_0, d x (q - 16) for Q5_0, d x q + m for Q4_1 and
    Q5_1), into float32."""

    def __init__(self, records: torch.Tensor, block_format: str, num_embeddings: int) -> None:
        super().__init__()
        _, blocks, record_bytes = records.shape
        self.records = records
        self.block_format = block_format
        self.num_embeddings = num_embeddings
        self.embedding_dim = blocks * BLOCK
        self._tiles = records.view(records.shape[0], blocks * record_bytes)
        self._where = gguf_rows_in_records(block_format, blocks)  # (TILE, row bytes)
        self._block_bytes = GGUF_BLOCK_BYTES[block_format]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        tiles = self._tiles.index_select(0, flat.div(TILE, rounding_mode="floor"))
        rows = tiles.gather(1, self._where.index_select(0, flat.remainder(TILE)))
        blocks = rows.view(flat.numel(), -1, self._block_bytes)  # as the file holds them
        scale = blocks[..., :2].view(torch.float16).float()  # (N, blocks, 1)
        if self.block_format == "q8_0":
            values = blocks[..., 2:].view(torch.int8) * scale
        elif self.block_format in HIGH_BITS_AT:  # Q5_0, Q5_1: their high bits reordered back
            in_file = five_bit_rows_from_records(rows, self.block_format).view_as(blocks)
            codes = five_bit_codes(in_file, self.block_format)
            if self.block_format == "q5_0":
                values = (codes - 16) * scale
            else:
                values = codes * scale + blocks[..., 2:4].view(torch.float16).float()
        else:  # q4_1: byte k holds value k in its low nibble, k + 16 in its high one
            codes = blocks[..., 4:]
            values = torch.cat([codes & 15, codes >> 4], dim=-1) * scale
            values += blocks[..., 2:4].view(torch.float16).float()
        return values.view(*ids.shape, self.embedding_dim)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, kind={self.block_format} records"


class FloatEmbedding(nn.Module):
    """Rows of a float32 table that views the mapped file: nothing is copied, and only the
    pages of rows looked up are read (a plain attribute, which materializing the model leaves
    alone)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table
        self.num_embeddings, self.embedding_dim = table.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.table)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, kind=float32 in the file"
