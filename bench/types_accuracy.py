"""Each GGUF type's arithmetic against the float32 reading of the same file: `python -m
bench.types_accuracy`.

For each file (the default model requantized by llama-quantize, as `make bench-types` makes
them), over `bench/accuracy.py`'s fixed text (1,024 tokens, teacher-forced, one forward): our
engine's logits in the file's own codes under the default precision (8-bit activations, as
llama.cpp) and under `--precision exact` (float32 activations), against the file dequantized
to float32 (the reference path). Per precision: top-1 agreement with the reference, the
largest logit deviation, and the perplexity of the text against the reference's.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.accuracy import FIXED_TEXT, sequence_logits
from bench.bench_models import default_requantized
from bench.speed_bench import llama_server_binary
from worker.machine.cpu_info import describe
from worker.model.default_model import default_model_path
from worker.model.loader import load_model
from worker.model.model_dir import resolve_model_dir
from worker.text.tokenizer import Tokenizer

TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K")


@dataclass(frozen=True)
class Comparison:
    """Logits of one computation against the reference's, over the same positions."""

    top1: float  # share of positions whose argmax is the reference's
    largest_deviation: float  # the largest |logit - reference logit|
    perplexity: float  # of the text's next tokens under these logits


def perplexity(logits: torch.Tensor, ids: Sequence[int]) -> float:
    """exp of the mean negative log-likelihood of ids[1:] under logits[:-1]."""
    targets = torch.tensor(ids[1:])
    log_probs = torch.log_softmax(logits[:-1].double(), dim=-1)
    return math.exp(-log_probs.gather(1, targets[:, None]).mean().item())


def compare(logits: torch.Tensor, reference: torch.Tensor, ids: Sequence[int]) -> Comparison:
    return Comparison(
        top1=(logits.argmax(-1) == reference.argmax(-1)).float().mean().item(),
        largest_deviation=(logits - reference).abs().max().item(),
        perplexity=perplexity(logits, ids),
    )


def measure(gguf: Path, max_tokens: int) -> tuple[float, dict[str, Comparison]]:
    """The reference's perplexity, and per precision our logits against it."""
    folder = resolve_model_dir(gguf)
    ids = Tokenizer(folder).encode(FIXED_TEXT)[:max_tokens]
    cpu = torch.device("cpu")
    reference = sequence_logits(load_model(folder, torch.float32, cpu), ids)
    ours = {
        precision: sequence_logits(
            load_model(folder, torch.float32, cpu, quantization="gguf", int8_activations=int8),
            ids,
        )
        for precision, int8 in (("file", True), ("exact", False))
    }
    return perplexity(reference, ids), {p: compare(o, reference, ids) for p, o in ours.items()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default=",".join(TYPES), help="llama-quantize type names")
    parser.add_argument("--tokens", type=int, default=1024, help="positions of the fixed text")
    args = parser.parse_args(argv)
    binary = llama_server_binary(None)
    if binary is None:
        raise SystemExit("llama-quantize is needed: bench/build_llama_server.sh")
    quantize = Path(binary).with_name("llama-quantize")
    print(f"{describe()}\n")
    print(
        "| file | float32 perplexity | file: top-1 | largest deviation | perplexity "
        "| exact: top-1 | largest deviation | perplexity |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind in args.types.split(","):
        gguf = default_model_path() if kind == "Q4_1" else default_requantized(quantize, kind)
        reference, by_precision = measure(gguf, args.tokens)
        cells = [f"{reference:.3f}"]
        for result in by_precision.values():
            change = 100 * (result.perplexity / reference - 1)
            cells += [
                f"{100 * result.top1:.1f}%",
                f"{result.largest_deviation:.2f}",
                f"{result.perplexity:.3f} ({change:+.2f}%)",
            ]
        print(f"| {kind} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
