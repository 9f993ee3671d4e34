"""Cache-aware routing: prefix affinity over text blocks, with a load-balance escape hatch."""

import pytest

from common.schemas import Register
from gateway.prefix_index import BLOCK_CHARS, ApproxPrefixIndex, block_hashes
from gateway.registry import WorkerRegistry
from gateway.router import CacheAware

SYSTEM_A = "A" * (BLOCK_CHARS * 8)
SYSTEM_B = "B" * (BLOCK_CHARS * 8)


def workers(*ids: str):
    registry = WorkerRegistry()
    for worker_id in ids:
        registry.register(
            worker_id.encode(), Register(worker_id, "i", "m", 512, 8, 100, 16, 1, "h"), 0.0
        )
    return registry


def test_block_hashes_are_chained_over_full_blocks():
    text = "x" * (BLOCK_CHARS * 2 + 5)
    hashes = block_hashes(text)
    assert len(hashes) == 2
    assert hashes[0] != hashes[1]  # same block content, different position in the chain
    assert block_hashes("y" + text[1:])[1] != hashes[1]  # an earlier change changes the rest


def test_index_matches_leading_blocks_and_evicts_least_recent():
    index = ApproxPrefixIndex(max_blocks=10)
    a, b = block_hashes(SYSTEM_A), block_hashes(SYSTEM_B)
    index.insert(a)
    assert index.match(a) == 8 and index.match(b) == 0
    assert index.match(block_hashes(SYSTEM_A[: BLOCK_CHARS * 3] + "zz" * BLOCK_CHARS)) == 3
    index.insert(b)  # 16 blocks into 10: the oldest six of A go
    assert len(index) == 10 and index.match(b) == 8 and index.match(a) == 0


def test_same_prefix_goes_to_the_same_worker_and_tenants_spread():
    registry = workers("w0", "w1")
    policy = CacheAware()
    first_a = policy.pick(registry.live(), SYSTEM_A + " question 1")
    first_a.in_flight.add("a1")
    first_b = policy.pick(registry.live(), SYSTEM_B + " question 1")
    assert first_b.worker_id != first_a.worker_id  # no match: the least loaded one
    for i in range(5):
        assert policy.pick(registry.live(), SYSTEM_A + f" question {i}") is first_a
        assert policy.pick(registry.live(), SYSTEM_B + f" question {i}") is first_b


def test_short_prompts_and_weak_matches_go_to_the_least_loaded():
    registry = workers("w0", "w1")
    policy = CacheAware(min_match=0.5)
    busy = policy.pick(registry.live(), SYSTEM_A)
    busy.in_flight.update({"r1", "r2"})
    other = next(w for w in registry.live() if w is not busy)
    # Shares only 2 of 8 blocks with what `busy` saw: below min_match.
    weak = SYSTEM_A[: BLOCK_CHARS * 2] + "C" * (BLOCK_CHARS * 6)
    assert policy.pick(registry.live(), weak) is other
    assert policy.pick(registry.live(), "hi") is other  # no full block at all


def test_far_busier_worker_loses_its_affinity():
    registry = workers("w0", "w1")
    policy = CacheAware(balance_abs=4, balance_rel=1.5)
    home = policy.pick(registry.live(), SYSTEM_A)
    home.in_flight.update(f"r{i}" for i in range(5))
    assert policy.pick(registry.live(), SYSTEM_A + "?") is not home


def test_forget_drops_a_departed_workers_index():
    registry = workers("w0", "w1")
    policy = CacheAware()
    home = policy.pick(registry.live(), SYSTEM_A)
    policy.forget(home.worker_id)
    home.in_flight.add("busy")
    assert policy.pick(registry.live(), SYSTEM_A) is not home


@pytest.mark.parametrize("name", ["cache_aware", "least_loaded", "round_robin"])
def test_every_policy_is_constructible_by_name(name):
    from gateway.router import make_policy

    assert make_policy(name).name == name
