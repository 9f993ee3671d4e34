"""llama.cpp's own log-probabilities of a text: `llama-perplexity --kl-divergence-base`'s file.

llama-perplexity splits the tokenized text into chunks of `n_ctx` tokens, runs each through
one `llama_decode` and saves, for the second half of every chunk (rows n_ctx/2 .. n_ctx-2),
each row's log-softmax over the vocabulary, 16 bits a value: per row a float32 scale and the
lowest log-probability kept (16 nats under the best), then one uint16 step count per token.
This is the file llama.cpp's own KL-divergence statistics read; here it is our engine's
reference for a quantized file's arithmetic.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

MAGIC = b"_logits_"


@dataclass(frozen=True)
class LlamaLogProbs:
    """The saved rows: `tokens` (chunks, n_ctx) as tokenized, before each chunk's first token
    becomes BOS where the vocabulary adds one; `log_probs` (chunks, rows, vocab) for positions
    `first` .. n_ctx-2 of each chunk (each predicting the token after it)."""

    tokens: torch.Tensor
    first: int
    log_probs: torch.Tensor

    @property
    def n_ctx(self) -> int:
        return int(self.tokens.shape[1])


def read_log_probs(path: Path) -> LlamaLogProbs:
    """Parse a `--kl-divergence-base` file into float32 log-probabilities."""
    data = path.read_bytes()
    if data[: len(MAGIC)] != MAGIC:
        raise ValueError(f"{path} is not a llama-perplexity log-probability file")
    n_ctx, n_vocab, n_chunk = np.frombuffer(data, np.int32, 3, len(MAGIC)).tolist()
    offset = len(MAGIC) + 12
    tokens = np.frombuffer(data, np.int32, n_chunk * n_ctx, offset).reshape(n_chunk, n_ctx)
    offset += tokens.nbytes
    first = n_ctx // 2
    rows = n_ctx - 1 - first
    width = 2 * ((n_vocab + 1) // 2) + 4  # uint16s a row: two float32 headers, values, padding
    raw = np.frombuffer(data, np.uint16, n_chunk * rows * width, offset).reshape(-1, width)
    if offset + raw.nbytes != len(data):
        raise ValueError(f"{path}: {len(data) - offset - raw.nbytes} bytes past the last row")
    header = np.ascontiguousarray(raw[:, :4]).view(np.float32)  # (scale, lowest log-prob)
    values = raw[:, 4 : 4 + n_vocab].astype(np.float32) * header[:, :1] + header[:, 1:2]
    return LlamaLogProbs(
        torch.from_numpy(tokens.astype(np.int64)),
        first,
        torch.from_numpy(values).reshape(n_chunk, rows, n_vocab),
    )


def llama_log_probs(
    binary: Path,
    gguf: Path,
    text: str,
    workdir: Path,
    n_ctx: int = 512,
    threads: int = 2,
    extra: tuple[str, ...] = (),
) -> LlamaLogProbs:
    """Run llama-perplexity (`binary`) on `text` with the file and read what it saved; the
    text must tokenize to at least two chunks."""
    workdir.mkdir(parents=True, exist_ok=True)
    text_path, saved = workdir / "text.txt", workdir / f"{gguf.stem}.kld"
    text_path.write_text(text)
    command = [str(binary), "-m", str(gguf), "-f", str(text_path), "-c", str(n_ctx)]
    command += ["-b", str(n_ctx), "-t", str(threads), "--kl-divergence-base", str(saved), *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not saved.exists():
        raise RuntimeError(f"llama-perplexity failed ({done.returncode}): {done.stderr[-2000:]}")
    try:
        return read_log_probs(saved)
    finally:
        saved.unlink()
