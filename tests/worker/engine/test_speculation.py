"""NgramDrafter, DecodeCost, ServedDecodeCost and DraftState: the guesses (the continuation of
the latest earlier occurrence of the last n tokens), and how many of them to feed, from the
measured step cost and each sequence's acceptance."""

from __future__ import annotations

import random

import pytest
import torch

from worker.engine.speculation import (
    DecodeCost,
    DraftState,
    NgramDrafter,
    ServedDecodeCost,
    best_draft_rows,
    measure_decode_cost,
)
from worker.model.batch import ForwardBatch

# Shaped like a 2-core AVX2 CPU's step (ms): memory bound at one row, compute bound from ~4.
CPU = DecodeCost((1, 2, 4, 8, 16), (7.0, 9.5, 13.5, 23.0, 41.0))
# Shaped like a GPU's: a row costs next to nothing against reading the weights.
GPU = DecodeCost((1, 16), (5.0, 5.2))


def test_interpolates_between_measured_rows_and_extrapolates_past_them():
    assert CPU(1) == 7.0 and CPU(8) == 23.0
    assert CPU(3) == pytest.approx(11.5)
    assert CPU(32) == pytest.approx(41.0 + 16 * (41.0 - 23.0) / 8)


def test_one_sequence_drafts_likely_tokens_and_not_unlikely_ones():
    likely = [0.9**j for j in range(1, 9)]
    assert best_draft_rows(CPU, 1, likely) >= 4
    assert best_draft_rows(CPU, 1, [0.2, 0.04]) == 0


def test_a_compute_bound_batch_drafts_nothing_a_gpu_batch_drafts_everything():
    chances = [0.6**j for j in range(1, 5)] * 8
    chances.sort(reverse=True)
    assert best_draft_rows(CPU, 8, chances) == 0
    assert best_draft_rows(GPU, 8, chances) == len(chances)


def test_served_steps_correct_the_probe_at_their_row_counts_and_between_them():
    served = ServedDecodeCost(CPU)
    assert served(3) == CPU(3)  # nothing served yet: the probe's table
    served.observe(1, 14.0)  # twice the probe
    served.observe(8, 92.0)  # four times
    assert served(1) == pytest.approx(14.0) and served(8) == pytest.approx(92.0)
    assert served(4) == pytest.approx(CPU(4) * (2 + 2 * 3 / 7))  # ratios linear in between
    assert served(16) == pytest.approx(CPU(16) * 4)  # past the last served: its ratio
    served.observe(1, 7.0)  # back to the probe: the ratio moves by one step's weight
    assert served(1) == pytest.approx(7.0 * 1.9)


def test_served_steps_that_find_extra_rows_dear_turn_drafting_off():
    served = ServedDecodeCost(CPU)
    likely = [0.9**j for j in range(1, 9)]
    assert best_draft_rows(served, 1, likely) >= 4
    served.observe(1, 7.0)
    for rows in range(2, 10):
        served.observe(rows, 7.0 * rows)  # each row as dear as a whole step
    assert best_draft_rows(served, 1, likely) == 0


def test_needs_at_least_two_rising_row_counts():
    with pytest.raises(ValueError):
        DecodeCost((1,), (1.0,))
    with pytest.raises(ValueError):
        DecodeCost((2, 1), (1.0, 2.0))


def test_acceptance_follows_what_is_kept():
    state = DraftState()
    start = state.acceptance
    state.observe(4, 4)
    assert state.acceptance > start
    high = state.acceptance
    state.observe(4, 0)
    assert state.acceptance < high
    for _ in range(30):
        state.observe(2, 0)
    assert state.acceptance < 0.01


def test_the_probe_times_one_sequence_fed_several_rows():
    seen: list[tuple[int, list[int]]] = []

    def forward(input_ids: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        rows = int(input_ids.shape[0])
        # Each row attends to the context and the rows before it, as a decode step feeds them.
        assert batch.max_query_len == 1 and batch.num_seqs == rows
        seen.append((rows, batch.positions.tolist()))
        assert all(
            bool(batch.mask[r, 0, 0, : p + 1].all())
            and not bool(batch.mask[r, 0, 0, p + 1 :].any())
            for r, p in enumerate(batch.positions.tolist())
        )
        return torch.zeros(rows, 4)

    cost = measure_decode_cost(forward, torch.device("cpu"), repeats=1)
    assert cost.rows[0] == 1 and len(cost.rows) >= 4
    assert list(cost.seconds) == sorted(cost.seconds)  # never cheaper with more rows
    assert {rows for rows, _ in seen} == set(cost.rows)
    assert all(
        positions == list(range(positions[0], positions[0] + len(positions)))
        for _, positions in seen
    )


def naive_proposal(tokens: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The same rule by brute force: longest n first, latest earlier occurrence, cyclic."""
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                extended = list(tokens)
                while len(extended) < len(tokens) + k:
                    extended.append(extended[start + n + len(extended) - len(tokens)])
                return extended[len(tokens) :]
    return []


def test_continues_the_latest_earlier_occurrence_of_the_longest_match():
    drafter = NgramDrafter(min_n=2, max_n=3)
    #          a  b  c  X  . b  c  Y  . a  b  c
    tokens = [1, 2, 3, 10, 0, 2, 3, 11, 0, 1, 2, 3]
    # "b c" last came before 11, but "a b c" (longer) came before 10: the longer one wins.
    assert drafter.propose(tokens, 3) == [10, 0, 2]


def test_a_loop_shorter_than_the_draft_goes_round_again():
    drafter = NgramDrafter(min_n=2, max_n=4)
    assert drafter.propose([5, 6, 7, 5, 6, 7, 5, 6], 7) == [7, 5, 6, 7, 5, 6, 7]


def test_new_text_gets_no_draft():
    drafter = NgramDrafter()
    assert drafter.propose([1, 2, 3, 4, 5], 4) == []
    assert drafter.propose([1], 4) == []
    assert drafter.propose([1, 2, 1, 2], 0) == []


@pytest.mark.parametrize("seed", range(5))
def test_growing_a_sequence_step_by_step_agrees_with_a_search_from_scratch(seed: int):
    rng = random.Random(seed)
    drafter = NgramDrafter(min_n=1, max_n=4)
    tokens = [rng.randrange(6) for _ in range(5)]
    for _ in range(120):
        k = rng.randrange(0, 6)
        assert drafter.propose(tokens, k) == naive_proposal(tokens, k, 1, 4)
        tokens.extend(rng.randrange(6) for _ in range(rng.randrange(1, 4)))


def test_refuses_an_empty_range_of_lengths():
    with pytest.raises(ValueError, match="min_n"):
        NgramDrafter(min_n=3, max_n=2)
