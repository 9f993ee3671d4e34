"""Exact routing: the worker whose KV events show most of the prompt's pages, with load guard."""

from common.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KvEventBatch
from common.kv_events import prompt_block_hashes as hashes_of
from common.schemas import Register
from gateway.registry import WorkerRegistry
from gateway.router import ExactPrefix, make_policy

PROMPT_A = list(range(100, 165))  # 65 tokens: 4 full pages of 16, the last one reusable
PROMPT_B = list(range(500, 565))


def workers(*ids: str, page_size: int = 16):
    registry = WorkerRegistry()
    for worker_id in ids:
        message = Register(worker_id, "i", "m", 512, 8, 100, page_size, 1, "h")
        registry.register(worker_id.encode(), message, 0.0)
    return registry


def holding(policy: ExactPrefix, worker_id: str, tokens: list[int], num_pages: int) -> None:
    """The worker's events say it holds the prompt's first `num_pages` pages."""
    policy.index.track(worker_id, 16)
    hashes = tuple(hashes_of(tokens, 16)[:num_pages])
    stored = BlockStored(hashes, None, tuple(tokens[: 16 * num_pages]), 16)
    policy.index.apply(worker_id, 0, KvEventBatch(0.0, (AllBlocksCleared(), stored)))


def test_exact_is_a_policy_by_name():
    assert isinstance(make_policy("exact"), ExactPrefix)


def test_the_worker_holding_the_prompts_pages_gets_it():
    registry = workers("w0", "w1")
    policy = ExactPrefix()
    holding(policy, "w1", PROMPT_A, 4)
    holding(policy, "w0", PROMPT_B, 4)
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=0.0).worker_id == "w1"
    assert policy.pick_tokens(registry.all(), PROMPT_B, now=0.0).worker_id == "w0"


def test_less_than_half_the_prompt_goes_to_the_least_loaded():
    registry = workers("w0", "w1")
    policy = ExactPrefix()
    holding(policy, "w1", PROMPT_A, 1)  # 16 of 64 reusable tokens
    registry.get("w1").in_flight.add("r")
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=0.0).worker_id == "w0"
    holding(policy, "w1", PROMPT_A, 2)  # 32 of 64: half
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=0.0).worker_id == "w1"


def test_a_worker_that_holds_the_prefix_wins_over_where_it_was_sent():
    registry = workers("w0", "w1")
    policy = ExactPrefix()
    holding(policy, "w0", PROMPT_A, 4)
    policy.pick_tokens(registry.all(), PROMPT_A, now=0.0)  # sent to w0
    removed = BlockRemoved(tuple(hashes_of(PROMPT_A, 16)[::-1]))
    policy.index.apply("w0", 1, KvEventBatch(0.0, (removed,)))  # evicted there
    holding(policy, "w1", PROMPT_A, 4)  # and computed on w1 (another gateway's request)
    registry.get("w1").in_flight.add("r")
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=20.0).worker_id == "w1"


def test_far_busier_holder_is_passed_over():
    registry = workers("w0", "w1")
    policy = ExactPrefix()
    holding(policy, "w1", PROMPT_A, 4)
    registry.get("w1").in_flight.update(f"r{i}" for i in range(9))
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=0.0).worker_id == "w0"


def test_a_prompt_just_routed_draws_its_prefix_before_any_event():
    registry = workers("w0", "w1")
    policy = ExactPrefix()
    for worker_id in ("w0", "w1"):
        policy.index.track(worker_id, 16)
    first = policy.pick_tokens(registry.all(), PROMPT_A, now=0.0)
    first.in_flight.add("r")  # it is now the busier one
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=1.0) is first
    # Expected pages lapse when the worker never confirms them: a worker that says it
    # holds half the prompt is then the better bet.
    holding(policy, "w1", PROMPT_A, 2)
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=60.0).worker_id == "w1"


def test_a_prefix_nobody_holds_goes_back_where_it_was_sent():
    registry = workers("w0", "w1")
    policy = ExactPrefix()
    holding(policy, "w0", PROMPT_A, 4)
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=0.0).worker_id == "w0"
    removed = BlockRemoved(tuple(hashes_of(PROMPT_A, 16)[::-1]))
    policy.index.apply("w0", 1, KvEventBatch(0.0, (removed,)))  # evicted
    registry.get("w0").in_flight.add("r")
    # Nobody holds it: it stays with w0, which keeps its share of the prefixes.
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=1.0).worker_id == "w0"


def test_each_page_size_gets_its_own_hashes():
    registry = workers("w0")
    for worker_id in ("w1",):
        message = Register(worker_id, "i", "m", 512, 8, 100, 32, 1, "h")
        registry.register(worker_id.encode(), message, 0.0)
    policy = ExactPrefix()
    policy.index.track("w1", 32)
    stored = BlockStored(tuple(hashes_of(PROMPT_A, 32)), None, tuple(PROMPT_A[:64]), 32)
    policy.index.apply("w1", 0, KvEventBatch(0.0, (AllBlocksCleared(), stored)))
    registry.get("w1").in_flight.add("r")
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=0.0).worker_id == "w1"


def test_without_token_ids_it_routes_on_the_text_as_cache_aware_does():
    registry = workers("w0", "w1")
    policy = ExactPrefix()
    text = "You are the tides desk's assistant. " * 20
    assert policy.pick(registry.all(), "short").worker_id == "w0"  # no block: least loaded
    first = policy.pick(registry.all(), text)
    first.in_flight.add("r")
    assert policy.pick(registry.all(), text) is first  # the text's blocks were sent there
    policy.forget(first.worker_id)
    assert policy.pick(registry.all(), text) is not first


def on_disk(policy: ExactPrefix, worker_id: str, tokens: list[int], num_pages: int) -> None:
    """The worker's events say its disk tier holds the prompt's first `num_pages` pages."""
    policy.index.track(worker_id, 16)
    hashes = tuple(hashes_of(tokens, 16)[:num_pages])
    stored = BlockStored(hashes, None, tuple(tokens[: 16 * num_pages]), 16, None, "DISK")
    policy.index.apply(worker_id, 0, KvEventBatch(0.0, (AllBlocksCleared(), stored)))


def test_a_worker_with_the_prefix_on_disk_wins_over_a_cold_one_and_memory_over_disk():
    registry = workers("w0", "w1", "w2")
    policy = ExactPrefix()
    policy.index.track("w0", 16)
    on_disk(policy, "w1", PROMPT_A, 4)
    assert policy.pick_tokens(registry.all()[:2], PROMPT_A, now=0.0).worker_id == "w1"
    policy = ExactPrefix()
    on_disk(policy, "w1", PROMPT_A, 4)
    holding(policy, "w2", PROMPT_A, 4)
    assert policy.pick_tokens(registry.all(), PROMPT_A, now=0.0).worker_id == "w2"
