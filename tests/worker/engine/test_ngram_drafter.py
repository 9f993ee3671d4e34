"""NgramDrafter: the continuation of the latest earlier occurrence of the last n tokens."""

from __future__ import annotations

import random

import pytest

from worker.engine.ngram_drafter import NgramDrafter


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
