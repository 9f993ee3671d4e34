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
# The largest deviation is one position's (the one nearest a rounding edge) and moves with the
# summation order alone; a high quantile of the positions' own largest deviations shows where
# the bulk of them lies.
TAIL_QUANTILE = 0.999
# llama-perplexity keeps 16 nats under a row's best (lower ones read as that floor): the KL
# divergence sums over float32's tokens within it, each one outside weighing under e^-16.
KL_WINDOW = 16.0


@dataclass(frozen=True)
class Distance:
    largest_deviation: float  # of a log-probability within DEVIATION_WINDOW of float32's best
    tail_deviation: float  # TAIL_QUANTILE of the positions' own largest deviations
    kl_divergence: float  # mean KL(float32 || this) over the positions
    perplexity: float  # of each position's next token
    perplexity_change: float  # percent over float32's perplexity on the same positions
    change_error: float  # the change's standard error in percent, from the positions' spread


@dataclass(frozen=True)
class AgainstLlama:
    """Our default precision and llama.cpp on the same file, each against float32."""

    top1: float  # share of positions where our argmax is llama.cpp's
    ours: Distance
    llama: Distance
    float32_perplexity: float
    # llama.cpp's other runs of the same chunks (another micro-batch size: other kernel paths),
    # each against float32: how far llama.cpp's own figures move with its summation order.
    llama_others: tuple[Distance, ...] = ()


def distance(log_probs: torch.Tensor, reference: torch.Tensor, targets: torch.Tensor) -> Distance:
    """Rows of log-probabilities against the reference's rows; targets: each row's next token."""
    best = reference.max(-1, keepdim=True).values
    difference = log_probs - reference
    deviation = torch.where(reference >= best - DEVIATION_WINDOW, difference.abs(), 0.0)
    kl = torch.where(reference >= best - KL_WINDOW, -reference.exp() * difference, 0.0).sum(-1)
    nll = -log_probs.double().gather(1, targets[:, None])[:, 0]
    change, error = perplexity_change(nll, -reference.double().gather(1, targets[:, None])[:, 0])
    by_position = deviation.max(-1).values
    return Distance(
        by_position.max().item(),
        torch.quantile(by_position.double(), TAIL_QUANTILE).item(),
        kl.mean().item(),
        math.exp(nll.mean().item()),
        change,
        error,
    )


def perplexity_change(nll: torch.Tensor, reference_nll: torch.Tensor) -> tuple[float, float]:
    """Percent change of perplexity over the reference's on the same positions (each one's
    negative log-likelihood of its next token), and that change's standard error. Paired
    position by position, the text's own spread of difficulty cancels, leaving what the
    arithmetic moved, whose mean's error is its spread over sqrt(positions)."""
    moved = nll.double() - reference_nll.double()
    ratio = math.exp(moved.mean().item())
    error = moved.std().item() / math.sqrt(len(moved)) if len(moved) > 1 else 0.0
    return 100 * (ratio - 1), 100 * ratio * error


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


def against_llama(
    folder: Path, llama: LlamaLogProbs, bos: int | None, *others: LlamaLogProbs
) -> AgainstLlama:
    """Our default precision and float32 on the chunks llama-perplexity scored, beside
    llama.cpp's rows (and those of its other runs of the same chunks)."""
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
        tuple(distance(llama_rows(other)[0], reference, targets) for other in others),
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
