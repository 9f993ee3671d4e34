"""WorkerRegistry and routing policies: registration, incarnations, expiry, choices."""

from common.schemas import Heartbeat, Register
from common.worker_stats import WorkerStats
from gateway.registry import WorkerRegistry
from gateway.router import LeastLoaded, RoundRobin, make_policy


def register(registry: WorkerRegistry, worker_id: str, incarnation: str = "a", now: float = 0.0):
    message = Register(worker_id, incarnation, "m", 512, 4, 100, 16, 1, "h")
    return registry.register(worker_id.encode(), message, now)


def beat(
    worker_id: str, incarnation: str = "a", waiting: int = 0, running: int = 0, free: int = 100
):
    return Heartbeat(
        worker_id, incarnation, waiting, running, free, 100, 0, WorkerStats(total_tasks=1)
    )


def test_register_is_idempotent_and_a_new_incarnation_replaces():
    registry = WorkerRegistry()
    assert register(registry, "w0") is None
    assert register(registry, "w0", now=1.0) is None
    assert registry.get("w0").last_seen == 1.0
    old = registry.get("w0")
    replaced = register(registry, "w0", incarnation="b", now=2.0)
    assert replaced is old
    assert registry.get("w0").incarnation == "b"


def test_heartbeats_of_old_incarnations_are_ignored():
    registry = WorkerRegistry()
    register(registry, "w0", incarnation="b")
    assert not registry.heartbeat(beat("w0", incarnation="a", running=3), now=1.0)
    assert registry.get("w0").running == 0
    assert registry.heartbeat(beat("w0", incarnation="b", running=3), now=1.0)
    assert registry.get("w0").running == 3
    assert not registry.heartbeat(beat("unknown"), now=1.0)


def test_expire_removes_only_silent_workers():
    registry = WorkerRegistry()
    register(registry, "w0", now=0.0)
    register(registry, "w1", now=0.0)
    registry.heartbeat(beat("w1"), now=2.5)
    dead = registry.expire(now=3.5, timeout_s=3.0)
    assert [w.worker_id for w in dead] == ["w0"]
    assert [w.worker_id for w in registry.all()] == ["w1"]


def test_draining_workers_take_no_new_requests():
    registry = WorkerRegistry()
    register(registry, "w0")
    register(registry, "w1")
    registry.heartbeat(Heartbeat("w0", "a", 0, 0, 100, 100, 0, draining=True), now=0.0)
    assert [w.worker_id for w in registry.live()] == ["w1"]
    assert registry.models() == ["m"]


def test_least_loaded_counts_what_the_gateway_sent_since_the_heartbeat():
    registry = WorkerRegistry()
    register(registry, "w0")
    register(registry, "w1")
    registry.get("w0").in_flight.update({"r1", "r2"})
    policy = LeastLoaded()
    assert policy.pick(registry.live(), "").worker_id == "w1"
    registry.heartbeat(beat("w1", waiting=2, running=4), now=0.0)
    assert policy.pick(registry.live(), "").worker_id == "w0"


def test_least_loaded_breaks_ties_by_free_pages_then_id():
    registry = WorkerRegistry()
    register(registry, "w0")
    register(registry, "w1")
    registry.heartbeat(beat("w1", free=90), now=0.0)
    assert LeastLoaded().pick(registry.live(), "").worker_id == "w0"


def test_round_robin_cycles_in_id_order():
    registry = WorkerRegistry()
    for worker_id in ("w2", "w0", "w1"):
        register(registry, worker_id)
    policy = RoundRobin()
    picks = [policy.pick(registry.live(), "").worker_id for _ in range(4)]
    assert picks == ["w0", "w1", "w2", "w0"]


def test_make_policy_rejects_unknown_names():
    import pytest

    with pytest.raises(ValueError, match="routing must be one of"):
        make_policy("random")


def test_the_routing_option_names_every_policy_the_router_has():
    """The gateway's --routing choices come from gateway.routing_names (no router imports)."""
    from gateway.router import POLICIES
    from gateway.routing_names import ROUTING_POLICIES

    assert sorted(POLICIES) == sorted(ROUTING_POLICIES)
    for name in ROUTING_POLICIES:
        assert make_policy(name).name == name
