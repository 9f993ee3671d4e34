"""The distance of log-probabilities from float32's (bench/llama_agreement.py)."""

from __future__ import annotations

import math

import pytest
import torch

from bench.llama_agreement import DEVIATION_WINDOW, KL_WINDOW, argmax_agreement, distance


def test_the_largest_deviation_counts_tokens_within_the_window_of_the_best_only() -> None:
    reference = torch.log_softmax(torch.tensor([[5.0, 4.0, 5.0 - DEVIATION_WINDOW - 1]]), -1)
    moved = reference + torch.tensor([[0.0, 0.25, 3.0]])  # the far token moves most
    assert distance(moved, reference, torch.tensor([0])).largest_deviation == pytest.approx(0.25)


def test_kl_divergence_is_float32_s_probability_times_the_log_ratio() -> None:
    reference = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.1]]))
    other = torch.log(torch.tensor([[0.25, 0.75], [0.9, 0.1]]))
    expected = (0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)) / 2  # second row: 0
    assert distance(other, reference, torch.tensor([0, 0])).kl_divergence == pytest.approx(expected)


def test_kl_divergence_leaves_out_tokens_under_llama_perplexity_s_floor() -> None:
    """A token float32 puts 20 nats under the best is saved at llama's floor, far above its
    own value: it must not count (its probability is under e^-16 anyway)."""
    reference = torch.log_softmax(torch.tensor([[0.0, -20.0]]), -1)
    floored = reference.clone()
    floored[0, 1] = reference[0, 0] - KL_WINDOW
    assert distance(floored, reference, torch.tensor([0])).kl_divergence == pytest.approx(0.0)


def test_perplexity_reads_each_row_s_next_token() -> None:
    rows = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.75]]))
    result = distance(rows, rows, torch.tensor([1, 0]))
    assert result.perplexity == pytest.approx(math.exp(-(math.log(0.5) + math.log(0.25)) / 2))
    assert result.largest_deviation == 0.0 and result.kl_divergence == 0.0


def test_argmax_agreement_compares_argmaxes_along_the_vocabulary() -> None:
    a = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 2.0], [3.0, 0.0]]])
    b = torch.tensor([[[2.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 3.0]]])
    assert argmax_agreement(a, b) == pytest.approx(0.5)


def test_perplexity_change_pairs_each_position_with_float32_s() -> None:
    """Two positions, one moved by +0.2 nats and one by 0: the change is exp(0.1) - 1, its
    error the spread of the moves (0.1414) over sqrt(2), scaled by the ratio."""
    reference = torch.log(torch.tensor([[0.5, 0.5], [0.8, 0.2]]))
    moved = reference.clone()
    moved[0] -= torch.tensor([0.2, -0.2])
    result = distance(moved, reference, torch.tensor([0, 1]))
    ratio = math.exp(0.1)
    assert result.perplexity_change == pytest.approx(100 * (ratio - 1))
    assert result.change_error == pytest.approx(100 * ratio * math.sqrt(0.02) / math.sqrt(2))


def test_an_unmoved_side_has_no_change_and_no_error() -> None:
    rows = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.75], [0.9, 0.1]]))
    result = distance(rows, rows, torch.tensor([1, 0, 0]))
    assert result.perplexity_change == 0.0 and result.change_error == 0.0


def test_the_tail_deviation_is_a_quantile_of_each_position_s_largest() -> None:
    """1,000 positions, one moved by 5 and the rest by 0.1: the largest is 5, while 99.9% of
    the positions lie at 0.1 (the quantile interpolates a little toward the one)."""
    reference = torch.log_softmax(torch.zeros(1000, 4), -1)
    moved = reference.clone()
    moved[:, 0] += 0.1
    moved[7, 0] += 4.9
    result = distance(moved, reference, torch.zeros(1000, dtype=torch.long))
    assert result.largest_deviation == pytest.approx(5.0)
    assert result.tail_deviation < 0.11
