"""The per-type correctness figures' arithmetic (bench/types_accuracy.py)."""

from __future__ import annotations

import math

import pytest
import torch

from bench.types_accuracy import compare, perplexity


def test_uniform_logits_have_the_vocabulary_s_size_as_perplexity() -> None:
    assert perplexity(torch.zeros(5, 32), [1, 2, 3, 4, 5]) == pytest.approx(32)


def test_perplexity_scores_the_next_token_not_the_current_one() -> None:
    logits = torch.full((3, 4), -30.0)
    logits[0, 2] = logits[1, 3] = 30.0  # position i predicts ids[i + 1]
    assert perplexity(logits, [0, 2, 3]) == pytest.approx(1.0)
    assert perplexity(logits, [0, 3, 2]) > 1e20


def test_compare_reads_agreement_deviation_and_perplexity() -> None:
    reference = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 0.0]])
    ours = torch.tensor([[2.0, 0.5], [1.5, 1.0], [1.0, 0.0]])
    result = compare(ours, reference, [0, 0, 1])
    assert result.top1 == pytest.approx(2 / 3)
    assert result.largest_deviation == pytest.approx(1.5)
    # -log p of each row's next token: log(1 + e^(other - target)).
    expected = math.exp((math.log(1 + math.exp(-1.5)) + math.log(1 + math.exp(0.5))) / 2)
    assert result.perplexity == pytest.approx(expected)


def test_compare_s_perplexity_change_is_over_the_reference_s_on_the_same_text() -> None:
    reference = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 0.0]])
    ours = torch.tensor([[2.0, 0.5], [1.5, 1.0], [1.0, 0.0]])
    result = compare(ours, reference, [0, 0, 1])
    change = 100 * (result.perplexity / perplexity(reference, [0, 0, 1]) - 1)
    assert result.perplexity_change == pytest.approx(change)
    assert result.change_error > 0
