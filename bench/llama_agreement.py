"""Our default precision and llama.cpp on the same GGUF, each against the file's float32 reading.

llama-perplexity's log-probabilities (bench/llama_logits.py) are llama.cpp's arithmetic on the
file; ours run the same chunks (their first token BOS where the file adds one, as llama.cpp
feeds them) under the default precision and in float32. Each side's distance from float32:
the largest log-probability deviation over the tokens a sampler could pick, the mean KL
divergence, the perplexity of each position's next token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import gguf
import torch

from bench.accuracy import sequence_logits
from bench.llama_logits import LlamaLogProbs
from worker.model.llama import LlamaModel
from worker.model.loader import load_model

# Log-probabilities within this many nats of float32's best count towards the largest
# deviation: the tokens a sampler could pick.
DEVIATION_WINDOW = 10.0
# llama-perplexity keeps 16 nats under a row's best (lower ones read as that floor): the KL
# divergence sums over float32's tokens within it, each one outside weighing under e^-16.
KL_WINDOW = 16.0


@dataclass(frozen=True)
class Distance:
    largest_deviation: float  # of a log-probability within DEVIATION_WINDOW of float32's best
    kl_divergence: float  # mean KL(float32 || this) over the positions
    perplexity: float  # of each position's next token


@dataclass(frozen=True)
class AgainstLlama:
    """Our default precision and llama.cpp on the same file, each against float32."""

    top1: float  # share of positions where our argmax is llama.cpp's
    ours: Distance
    llama: Distance
    float32_perplexity: float


def distance(log_probs: torch.Tensor, reference: torch.Tensor, targets: torch.Tensor) -> Distance:
    """Rows of log-probabilities against the reference's rows; targets: each row's next token."""
    best = reference.max(-1, keepdim=True).values
    difference = log_probs - reference
    deviation = torch.where(reference >= best - DEVIATION_WINDOW, difference.abs(), 0.0)
    kl = torch.where(reference >= best - KL_WINDOW, -reference.exp() * difference, 0.0).sum(-1)
    nll = -log_probs.double().gather(1, targets[:, None])
    return Distance(deviation.max().item(), kl.mean().item(), math.exp(nll.mean().item()))


def our_log_probs(model: LlamaModel, llama: LlamaLogProbs, bos: int | None) -> torch.Tensor:
    """(positions, vocab): the model's log-probabilities on the rows llama-perplexity scored,
    each chunk's first token BOS where the file adds one, as llama.cpp feeds it."""
    rows = slice(llama.first, llama.n_ctx - 1)
    chunks = []
    for chunk in llama.tokens.tolist():
        ids = [bos, *chunk[1:]] if bos is not None else chunk
        chunks.append(torch.log_softmax(sequence_logits(model, ids)[rows].float(), dim=-1))
    return torch.cat(chunks)


def llama_rows(llama: LlamaLogProbs) -> tuple[torch.Tensor, torch.Tensor]:
    """llama.cpp's rows as (positions, vocab), and each position's next token."""
    targets = llama.tokens[:, llama.first + 1 :].reshape(-1)
    return llama.log_probs.reshape(-1, llama.log_probs.shape[-1]), targets


def against_llama(folder: Path, llama: LlamaLogProbs, bos: int | None) -> AgainstLlama:
    """Our default precision and float32 on the chunks llama-perplexity scored, beside
    llama.cpp's rows."""
    cpu = torch.device("cpu")
    reference_model = load_model(folder, torch.float32, cpu)
    file_model = load_model(folder, torch.float32, cpu, quantization="gguf", int8_activations=True)
    ours = our_log_probs(file_model, llama, bos)
    reference = our_log_probs(reference_model, llama, bos)
    theirs, targets = llama_rows(llama)
    return AgainstLlama(
        argmax_agreement(ours, theirs),
        distance(ours, reference, targets),
        distance(theirs, reference, targets),
        distance(reference, reference, targets).perplexity,
    )


def added_bos(path: Path) -> int | None:
    """The BOS id llama.cpp puts first in each chunk, or None where the file adds none."""
    fields = gguf.GGUFReader(str(path)).fields
    adds = fields.get("tokenizer.ggml.add_bos_token")
    if adds is None or not adds.contents():
        return None
    return int(fields["tokenizer.ggml.bos_token_id"].contents())


def argmax_agreement(rows: torch.Tensor, reference: torch.Tensor) -> float:
    """Share of positions (the last dimension: the vocabulary) whose argmax is the reference's."""
    return (rows.argmax(-1) == reference.argmax(-1)).float().mean().item()
