"""Token rows read out of records and out of a float table: the file's values, exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from worker.kernels.layout import records_from_gguf
from worker.model.table_embedding import FloatEmbedding, RecordsEmbedding

KINDS = {"q4_1": "Q4_1", "q8_0": "Q8_0"}


def gguf_rows(kind: str, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, row bytes) of random values quantized by the gguf package, and those bytes
    dequantized by it (the oracle)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    qtype = GGMLQuantizationType[KINDS[kind]]
    values = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)
    raw = quantize(values, qtype)
    table = np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(rows, cols)
    return torch.from_numpy(np.ascontiguousarray(raw)), torch.from_numpy(table)


@pytest.mark.parametrize("kind", ["q4_1", "q8_0"])
def test_rows_from_records_are_the_files_rows(kind):
    # 21 rows: the last tile is padded; ids in any shape, repeated, at both ends.
    raw, table = gguf_rows(kind, 21, 96)
    records = records_from_gguf(raw, kind).records
    embedding = RecordsEmbedding(records, kind, 21)
    ids = torch.tensor([[0, 7, 8, 20], [13, 13, 1, 16]])

    rows = embedding(ids)

    assert rows.shape == (2, 4, 96) and rows.dtype == torch.float32
    assert torch.equal(rows, table[ids])
    assert embedding.records is records  # read where the output layer's kernel reads


def test_float_rows_view_the_table_they_were_given():
    table = torch.randn(10, 8)
    embedding = FloatEmbedding(table)

    assert torch.equal(embedding(torch.tensor([3, 9, 3])), table[[3, 9, 3]])
    assert embedding.table.data_ptr() == table.data_ptr()
