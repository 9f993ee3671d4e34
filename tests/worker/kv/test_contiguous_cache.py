"""ContiguousCache: one slot per sequence, lowest slot first, flat rows of the slot."""

from __future__ import annotations

import pytest
import torch

from worker.kv.base import Admission, CacheStats, KVStepPlan, KVStorage, NewPages
from worker.kv.contiguous import ContiguousCache

MAX_SEQ_LEN = 8
BYTES = 2 * 3 * MAX_SEQ_LEN * 2 * 4  # k + v, 3 slots, 1 layer, 1 kv head, head_dim 2, fp32


def make_cache(num_slots: int = 3) -> ContiguousCache:
    storage = KVStorage(1, num_slots, MAX_SEQ_LEN, 1, 2, torch.float32, torch.device("cpu"))
    return ContiguousCache(storage)


def stats(in_use: int) -> CacheStats:
    return CacheStats(3, in_use, 0, 3 - in_use, MAX_SEQ_LEN, 0, BYTES)


def test_assigns_the_lowest_free_slot_and_returns_no_hit() -> None:
    cache = make_cache()
    assert cache.max_tokens_per_seq == MAX_SEQ_LEN
    assert cache.admit(10, [1, 2, 3]) == Admission(0, 0)
    assert cache.admit(11, [1, 2, 3]) == Admission(0, 0)
    assert cache.slots(10, 0, 3) == [0, 1, 2]
    assert cache.slots(11, 1, 4) == [9, 10, 11]
    assert cache.stats() == stats(2)


def test_read_slots_are_the_rows_of_each_slot() -> None:
    cache = make_cache()
    cache.admit(10, [1])
    cache.admit(11, [1])
    rows = cache.read_slots([11, 10], [5, 3])
    assert rows.dtype == torch.int64
    assert rows[0].tolist() == [8, 9, 10, 11, 12]
    assert rows[1, :3].tolist() == [0, 1, 2]
    assert rows.shape == (2, 5)
    assert all(0 <= row < 3 * MAX_SEQ_LEN for row in rows[1, 3:].tolist())


def test_release_frees_the_slot_for_the_next_admission_lowest_first() -> None:
    cache = make_cache()
    for seq_id in (10, 11, 12):
        cache.admit(seq_id, [1])
    assert cache.admit(13, [1]) is None
    assert cache.stats() == stats(3)
    cache.release(12)
    cache.release(10)
    assert cache.stats() == stats(1)
    assert cache.admit(13, [1]) == Admission(0, 0)
    assert cache.slots(13, 0, 2) == [0, 1]
    assert cache.admit(14, [1]) == Admission(0, 0)
    assert cache.slots(14, 0, 2) == [16, 17]


def test_admit_refuses_a_prompt_longer_than_a_slot() -> None:
    cache = make_cache()
    assert cache.admit(10, list(range(MAX_SEQ_LEN + 1))) is None
    assert cache.stats() == stats(0)
    assert cache.admit(10, list(range(MAX_SEQ_LEN))) == Admission(0, 0)


def test_grow_succeeds_up_to_the_slot_length() -> None:
    cache = make_cache()
    cache.admit(10, [1, 2])
    assert cache.grow(10, MAX_SEQ_LEN)
    assert not cache.grow(10, MAX_SEQ_LEN + 1)
    cache.commit(10, [1, 2], 2)
    assert cache.stats() == stats(1)


def test_unknown_and_duplicate_sequences_raise() -> None:
    cache = make_cache()
    cache.admit(10, [1])
    with pytest.raises(KeyError, match="sequence 10 already has a slot"):
        cache.admit(10, [1])
    for call in (
        lambda: cache.release(11),
        lambda: cache.slots(11, 0, 1),
        lambda: cache.grow(11, 1),
        lambda: cache.commit(11, [1], 1),
        lambda: cache.read_slots([11], [1]),
    ):
        with pytest.raises(KeyError, match="sequence 11 has no slot"):
            call()
    assert cache.stats() == stats(1)


def test_the_step_plan_lists_the_slots_given_since_begin_step() -> None:
    cache = make_cache()
    cache.admit(10, [1])
    cache.begin_step()
    cache.admit(11, [1])
    cache.admit(12, [1])
    cache.release(12)  # given back within the step: not in its plan
    assert cache.step_plan() == KVStepPlan(allocated=(NewPages(11, (1,)),))
