"""Routing policies: which live worker of a model gets the next request."""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Sequence

from gateway.registry import WorkerState


class RoutingPolicy(ABC):
    name: str

    @abstractmethod
    def pick(self, workers: Sequence[WorkerState], prompt_text: str) -> WorkerState:
        """One of `workers` (never empty) for a request whose prompt reads `prompt_text`."""

    def forget(self, worker_id: str) -> None:  # noqa: B027 - optional hook
        """A worker left; drop whatever the policy kept about it."""


class LeastLoaded(RoutingPolicy):
    """The worker with the fewest requests per slot, then the most free KV pages."""

    name = "least_loaded"

    def pick(self, workers: Sequence[WorkerState], prompt_text: str) -> WorkerState:
        return min(workers, key=lambda w: (w.load, -w.kv_pages_free, w.worker_id))


class RoundRobin(RoutingPolicy):
    name = "round_robin"

    def __init__(self) -> None:
        self._counter = itertools.count()

    def pick(self, workers: Sequence[WorkerState], prompt_text: str) -> WorkerState:
        ordered = sorted(workers, key=lambda w: w.worker_id)
        return ordered[next(self._counter) % len(ordered)]


POLICIES: dict[str, type[RoutingPolicy]] = {
    LeastLoaded.name: LeastLoaded,
    RoundRobin.name: RoundRobin,
}


def make_policy(name: str) -> RoutingPolicy:
    if name not in POLICIES:
        raise ValueError(f"routing must be one of {sorted(POLICIES)}, got {name!r}")
    return POLICIES[name]()
