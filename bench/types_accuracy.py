"""Each GGUF type's arithmetic against the float32 reading of the same file and against
llama.cpp's on it: `python -m bench.types_accuracy`.

For each file (the default model requantized by llama-quantize, as `make bench-types` makes
them), over a fixed text (`--text FILE`, else `bench/accuracy.py`'s; its first 1,024 tokens,
teacher-forced, one forward): our engine's logits in the file's own codes under the default
precision (8-bit activations, as llama.cpp) and under `--precision exact` (float32 activations
where a kernel takes them), against the file dequantized to float32 (the reference path).
Per precision: top-1 agreement with the reference, the largest logit deviation, and the
perplexity of the text against the reference's.

Then against llama.cpp (bench/llama_agreement.py): `llama-perplexity`'s log-probabilities of
the same text on the same file beside ours under the default precision, and llama.cpp's
agreement with itself at another micro-batch size, the floor any other implementation meets.
Each side's perplexity change over float32 comes with its standard error: a text of a few
hundred positions measures a change of half a percent no better than to +-0.4 points.
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
from bench.llama_agreement import (
    Distance,
    added_bos,
    against_llama,
    argmax_agreement,
    perplexity_change,
)
from bench.llama_logits import llama_log_probs
from bench.speed_bench import llama_server_binary
from worker.machine.cpu_info import describe
from worker.model.default_model import default_model_path
from worker.model.loader import load_model
from worker.model.model_dir import resolve_model_dir
from worker.text.tokenizer import Tokenizer

# llama-perplexity's micro-batch for its run against itself: 32 rows a matmul, not 512, take
# other kernel paths, whose float rounding alone moves some 8-bit activation codes.
SMALL_UBATCH = ("-ub", "32")
TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K")


@dataclass(frozen=True)
class Comparison:
    """Logits of one computation against the reference's, over the same positions."""

    top1: float  # share of positions whose argmax is the reference's
    largest_deviation: float  # the largest |logit - reference logit|
    perplexity: float  # of the text's next tokens under these logits
    perplexity_change: float  # percent over the reference's
    change_error: float  # the change's standard error, percent


def next_token_nll(logits: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """Each position's negative log-likelihood of ids[1:] under logits[:-1]."""
    targets = torch.tensor(ids[1:])
    log_probs = torch.log_softmax(logits[:-1].double(), dim=-1)
    return -log_probs.gather(1, targets[:, None])[:, 0]


def perplexity(logits: torch.Tensor, ids: Sequence[int]) -> float:
    """exp of the mean negative log-likelihood of ids[1:] under logits[:-1]."""
    return math.exp(next_token_nll(logits, ids).mean().item())


def compare(logits: torch.Tensor, reference: torch.Tensor, ids: Sequence[int]) -> Comparison:
    nll = next_token_nll(logits, ids)
    change, error = perplexity_change(nll, next_token_nll(reference, ids))
    return Comparison(
        top1=argmax_agreement(logits, reference),
        largest_deviation=(logits - reference).abs().max().item(),
        perplexity=math.exp(nll.mean().item()),
        perplexity_change=change,
        change_error=error,
    )


def measure(path: Path, text: str, max_tokens: int) -> tuple[float, dict[str, Comparison]]:
    """The reference's perplexity, and per precision our logits against it."""
    folder = resolve_model_dir(path)
    ids = Tokenizer(folder).encode(text)[:max_tokens]
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
    parser.add_argument("--text", type=Path, help="a text file (default: the W2 prompts)")
    parser.add_argument("--n-ctx", type=int, default=512, help="llama-perplexity's chunk size")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/astrai-types-accuracy"))
    args = parser.parse_args(argv)
    binary = llama_server_binary(None)
    if binary is None:
        raise SystemExit("llama.cpp's tools are needed: bench/build_llama_server.sh")
    tools = Path(binary).parent
    files = {
        kind: default_model_path()
        if kind == "Q4_1"
        else default_requantized(tools / "llama-quantize", kind)
        for kind in args.types.split(",")
    }
    text = args.text.read_text() if args.text else FIXED_TEXT
    print(f"{describe()}\n")
    print_against_float32(files, text, args.tokens)
    print_against_llama(files, text, tools / "llama-perplexity", args.workdir, args.n_ctx)


def print_against_float32(files: dict[str, Path], text: str, tokens: int) -> None:
    print(
        "| file | float32 perplexity | file: top-1 | largest deviation | perplexity "
        "| exact: top-1 | largest deviation | perplexity |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind, path in files.items():
        reference, by_precision = measure(path, text, tokens)
        cells = [f"{reference:.3f}"]
        for result in by_precision.values():
            cells += [
                f"{100 * result.top1:.1f}%",
                f"{result.largest_deviation:.2f}",
                change(result),
            ]
        print(f"| {kind} | {' | '.join(cells)} |", flush=True)


def print_against_llama(
    files: dict[str, Path], text: str, perplexity_tool: Path, workdir: Path, n_ctx: int
) -> None:
    print(
        "\n| file | top-1 vs llama.cpp | llama.cpp vs itself | largest deviation: ours "
        "| llama.cpp | ratio | llama.cpp -ub 32 | 99.9% of positions: ours | llama.cpp "
        "| llama.cpp -ub 32 | mean KL: ours | llama.cpp "
        "| perplexity: float32 | ours | llama.cpp | positions |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, path in files.items():
        llama = llama_log_probs(perplexity_tool, path, text, workdir, n_ctx)
        small = llama_log_probs(perplexity_tool, path, text, workdir, n_ctx, extra=SMALL_UBATCH)
        result = against_llama(resolve_model_dir(path), llama, added_bos(path), small)
        ours, theirs, (theirs_small,) = result.ours, result.llama, result.llama_others
        cells = [
            f"{100 * result.top1:.1f}%",
            f"{100 * argmax_agreement(small.log_probs, llama.log_probs):.1f}%",
            f"{ours.largest_deviation:.3f}",
            f"{theirs.largest_deviation:.3f}",
            f"{ours.largest_deviation / theirs.largest_deviation:.2f}",
            f"{theirs_small.largest_deviation:.3f}",
            f"{ours.tail_deviation:.3f}",
            f"{theirs.tail_deviation:.3f}",
            f"{theirs_small.tail_deviation:.3f}",
            f"{ours.kl_divergence:.5f}",
            f"{theirs.kl_divergence:.5f}",
            f"{result.float32_perplexity:.3f}",
            change(ours),
            change(theirs),
            str(llama.log_probs.shape[0] * llama.log_probs.shape[1]),
        ]
        print(f"| {kind} | {' | '.join(cells)} |", flush=True)


def change(side: Distance | Comparison) -> str:
    """A side's perplexity, its change over float32's and that change's standard error."""
    return f"{side.perplexity:.3f} ({side.perplexity_change:+.2f}% +- {side.change_error:.2f})"


if __name__ == "__main__":
    main()
