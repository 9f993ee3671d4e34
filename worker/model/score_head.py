"""ScoreHead: a reranker's relevance score of the final norm's row at its input's last token."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tokenizers
import torch
from safetensors import safe_open

from worker.model.gguf_tensors import dequantized_rows
from worker.model.model_dir import gguf_source

# Where a checkpoint keeps its output layer (a tied one: the embedding table), in order.
_OUTPUT_LAYERS = ("lm_head.weight", "model.embed_tokens.weight", "embed_tokens.weight")
_GGUF_OUTPUT_LAYERS = ("output.weight", "token_embd.weight")
_GGUF_CLASSIFIER = "cls.output.weight"  # transformers' score.weight
# Qwen3-Reranker's answer tokens: the score is P("yes") against "no" (its model card).
YES, NO = "yes", "no"


class ScoreHeadError(ValueError):
    """A reranker whose files hold no head computed here; the message says what is missing."""


@dataclass(frozen=True, eq=False)
class ScoreHead:
    """The logits are `weight` (L, hidden) times the row. With two or more rows the score is
    softmax(logits)[label]: Qwen3-Reranker's no and yes rows of its output layer (label 1),
    a GGUF's cls.output (llama.cpp's converter writes yes, no; llama-server scores the first,
    label 0), a two-label classifier (label 1). With one row it is sigmoid(logit): a one-label
    classifier, as sentence-transformers' CrossEncoder scores it."""

    weight: torch.Tensor  # (L, hidden) float32, on the model's device
    label: int
    source: str  # where the rows came from, for the worker's log

    def logits(self, row: torch.Tensor) -> torch.Tensor:
        """(L,) float32: the head's logits of one final-norm row (hidden,)."""
        return self.weight @ row.to(self.weight.device, torch.float32)

    def score(self, row: torch.Tensor) -> float:
        logits = self.logits(row)
        if logits.shape[0] == 1:
            return float(torch.sigmoid(logits[0]))
        return float(torch.softmax(logits, dim=0)[self.label])


def read_score_head(
    model_dir: Path, vocabulary: tokenizers.Tokenizer, device: torch.device
) -> ScoreHead:
    """The reranker's head from its files: a classifier where they hold one (`score.weight`,
    a GGUF's `cls.output.weight`), else the output layer's rows of the answer tokens (a
    sentence-transformers LogitScore module's, else "yes" and "no"). ScoreHeadError where
    there is neither."""
    source = gguf_source(model_dir)
    classifier = (
        dequantized_rows(source, _GGUF_CLASSIFIER)
        if source is not None
        else _safetensors_rows(model_dir, ("score.weight",), None)
    )
    if classifier is not None:
        name = _GGUF_CLASSIFIER if source is not None else "score.weight"
        labels = classifier.shape[0]
        label = 0 if source is not None or labels == 1 else 1
        return ScoreHead(classifier.to(device), label, f"{name}, {labels} label(s)")
    yes, no = _answer_tokens(model_dir, vocabulary)
    rows = [yes] if no is None else [no, yes]
    for name in _GGUF_OUTPUT_LAYERS if source is not None else _OUTPUT_LAYERS:
        weight = (
            dequantized_rows(source, name, rows)
            if source is not None
            else _safetensors_rows(model_dir, (name,), rows)
        )
        if weight is not None:
            named = ", ".join(vocabulary.id_to_token(r) or str(r) for r in rows)
            return ScoreHead(weight.to(device), len(rows) - 1, f"{name} rows of {named}")
    raise ScoreHeadError("its files hold neither a classifier nor an output layer")


def _answer_tokens(model_dir: Path, vocabulary: tokenizers.Tokenizer) -> tuple[int, int | None]:
    """(relevant, irrelevant or None): a LogitScore module's token ids, else "yes", "no"."""
    modules_file = model_dir / "modules.json"
    modules = json.loads(modules_file.read_text()) if modules_file.is_file() else []
    for module in modules if isinstance(modules, list) else []:
        if isinstance(module, dict) and str(module.get("type", "")).endswith("LogitScore"):
            config_file = model_dir / str(module.get("path", "")) / "config.json"
            config = json.loads(config_file.read_text())
            true_id, false_id = config.get("true_token_id"), config.get("false_token_id")
            if isinstance(true_id, int) and (false_id is None or isinstance(false_id, int)):
                return true_id, false_id
            raise ScoreHeadError("its LogitScore config names no true_token_id")
    yes, no = vocabulary.token_to_id(YES), vocabulary.token_to_id(NO)
    if yes is None or no is None:
        missing = f"its vocabulary no {YES!r} and {NO!r} tokens"
        raise ScoreHeadError(f"its files hold no classifier and {missing}")
    return yes, no


def _safetensors_rows(
    model_dir: Path, names: Sequence[str], rows: Sequence[int] | None
) -> torch.Tensor | None:
    """Rows of the first of `names` the folder's safetensors hold (all of them for None), as
    float32, read without the rest of the tensor; None where no file holds one."""
    files = sorted(model_dir.glob("*.safetensors"))
    for name in names:
        for file in files:
            with safe_open(str(file), framework="pt") as handle:
                if name not in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                    continue
                if rows is None:
                    return handle.get_tensor(name).float()
                table = handle.get_slice(name)
                picked = torch.cat([table[r : r + 1] for r in rows]).float()
                if picked.shape[0] != len(rows):
                    raise ScoreHeadError(f"{name} has no row among {list(rows)}")
                return picked
    return None
