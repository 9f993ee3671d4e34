"""A reranker's score head from its files: a classifier's rows, or the output layer's rows of
its answer tokens (a LogitScore module's, else "yes" and "no"); and the score they make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tokenizers
import torch
from safetensors.torch import save_file

from worker.model.score_head import ScoreHead, ScoreHeadError, read_score_head

CPU = torch.device("cpu")
HIDDEN = 4


def vocabulary(*words: str) -> tokenizers.Tokenizer:
    """Word i is id i."""
    return tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}))


def folder(tmp_path: Path, **tensors: torch.Tensor) -> Path:
    save_file(
        {name.replace("__", "."): t for name, t in tensors.items()}, tmp_path / "m.safetensors"
    )
    return tmp_path


TABLE = torch.arange(6 * HIDDEN, dtype=torch.float32).reshape(6, HIDDEN)  # row i: 4i .. 4i+3


def test_two_rows_score_the_softmax_of_the_label_and_one_row_its_sigmoid():
    row = torch.tensor([1.0, 0.0, -1.0, 2.0])
    weight = torch.tensor([[0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])  # logits 0.5, 2.0
    assert ScoreHead(weight, 1, "").score(row) == pytest.approx(1 / (1 + torch.e**-1.5))
    assert ScoreHead(weight, 0, "").score(row) == pytest.approx(1 / (1 + torch.e**1.5))
    assert ScoreHead(weight[1:], 0, "").score(row) == pytest.approx(1 / (1 + torch.e**-2.0))


def test_the_yes_and_no_rows_of_the_output_layer_make_qwen3_rerankers_head(tmp_path: Path):
    words = vocabulary("a", "no", "b", "yes", "c", "d")
    head = read_score_head(folder(tmp_path, lm_head__weight=TABLE), words, CPU)
    assert torch.equal(head.weight, TABLE[[1, 3]]) and head.label == 1
    assert head.source == "lm_head.weight rows of no, yes"


def test_a_tied_model_reads_them_from_its_embedding_table(tmp_path: Path):
    words = vocabulary("yes", "no")
    head = read_score_head(folder(tmp_path, model__embed_tokens__weight=TABLE), words, CPU)
    assert torch.equal(head.weight, TABLE[[1, 0]])
    assert head.source == "model.embed_tokens.weight rows of no, yes"


def test_a_logit_score_module_names_its_own_answer_tokens(tmp_path: Path):
    model = folder(tmp_path, lm_head__weight=TABLE)
    modules = [{"path": "1_LogitScore", "type": "sentence_transformers.LogitScore"}]
    (model / "modules.json").write_text(json.dumps(modules))
    (model / "1_LogitScore").mkdir()
    config = {"true_token_id": 5, "false_token_id": 2}
    (model / "1_LogitScore" / "config.json").write_text(json.dumps(config))
    head = read_score_head(model, vocabulary("yes", "no", "x", "y", "z", "w"), CPU)
    assert torch.equal(head.weight, TABLE[[2, 5]]) and head.label == 1
    config["false_token_id"] = None  # the true token's logit alone: its sigmoid
    (model / "1_LogitScore" / "config.json").write_text(json.dumps(config))
    alone = read_score_head(model, vocabulary("yes", "no"), CPU)
    assert torch.equal(alone.weight, TABLE[[5]]) and alone.source == "lm_head.weight rows of 5"


@pytest.mark.parametrize("labels", [1, 2])
def test_a_classifier_is_its_score_rows_whatever_the_vocabulary(tmp_path: Path, labels: int):
    score = TABLE[:labels] + 0.5
    model = folder(tmp_path, score__weight=score, lm_head__weight=TABLE)
    head = read_score_head(model, vocabulary("a"), CPU)
    assert torch.equal(head.weight, score) and head.label == labels - 1
    assert head.source == f"score.weight, {labels} label(s)"


def test_no_classifier_and_no_answer_tokens_is_a_score_head_error(tmp_path: Path):
    with pytest.raises(ScoreHeadError, match="its vocabulary no 'yes' and 'no' tokens"):
        read_score_head(folder(tmp_path, lm_head__weight=TABLE), vocabulary("a", "no"), CPU)
    with pytest.raises(ScoreHeadError, match="neither a classifier nor an output layer"):
        read_score_head(folder(tmp_path, other=TABLE), vocabulary("yes", "no"), CPU)
