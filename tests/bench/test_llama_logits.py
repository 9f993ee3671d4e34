"""Reading llama-perplexity's saved log-probabilities (bench/llama_logits.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bench.llama_logits import MAGIC, read_log_probs


def saved_file(path: Path, tokens: np.ndarray, rows: list[tuple[float, float, list[int]]]) -> None:
    """A file as llama-perplexity writes it: the header, the tokens, then per scored row its
    scale and lowest log-probability (float32) and one uint16 step count per token, padded to
    an even count."""
    n_chunk, n_ctx = tokens.shape
    n_vocab = len(rows[0][2])
    parts = [MAGIC, np.array([n_ctx, n_vocab, n_chunk], np.int32).tobytes()]
    parts.append(tokens.astype(np.int32).tobytes())
    for scale, lowest, steps in rows:
        parts.append(np.array([scale, lowest], np.float32).tobytes())
        parts.append(np.array(steps + [0] * (len(steps) % 2), np.uint16).tobytes())
    path.write_bytes(b"".join(parts))


def test_rows_decode_to_scale_times_steps_plus_the_lowest_log_probability(tmp_path: Path) -> None:
    tokens = np.arange(16).reshape(2, 8)  # n_ctx 8: rows 4..6 of each chunk, 3 a chunk
    rows = [(0.5, -16.0 - r, [0, 1, 2, 32 + r, 3]) for r in range(6)]  # 5 tokens: one pad
    saved_file(tmp_path / "f.kld", tokens, rows)
    read = read_log_probs(tmp_path / "f.kld")
    assert read.first == 4 and read.n_ctx == 8
    assert torch.equal(read.tokens, torch.from_numpy(tokens))
    assert read.log_probs.shape == (2, 3, 5)
    chunk, row = divmod(4, 3)  # the fifth row saved: chunk 1, its row 1
    assert read.log_probs[chunk, row].tolist() == [-20.0, -19.5, -19.0, -2.0, -18.5]


def test_a_file_of_another_kind_or_length_is_refused(tmp_path: Path) -> None:
    (tmp_path / "other").write_bytes(b"GGUF" + bytes(40))
    with pytest.raises(ValueError, match="not a llama-perplexity"):
        read_log_probs(tmp_path / "other")
    saved_file(tmp_path / "long", np.zeros((2, 4), np.int64), [(1.0, -1.0, [1, 2])] * 2)
    (tmp_path / "long").write_bytes((tmp_path / "long").read_bytes() + bytes(8))
    with pytest.raises(ValueError, match="8 bytes past the last row"):
        read_log_probs(tmp_path / "long")
