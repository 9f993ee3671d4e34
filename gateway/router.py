"""Routing policies: which live worker of a model gets the next request."""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Sequence

from common.kv_events import prompt_block_hashes
from gateway.kv_index import KvIndex
from gateway.prefix_index import ApproxPrefixIndex, block_hashes
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


class CacheAware(RoutingPolicy):
    """Send a prompt where its prefix was sent before, unless that worker is far busier.

    Per worker, an ApproxPrefixIndex of the prompt text it was sent. The worker matching
    the most leading blocks wins when the match covers at least `min_match` of the prompt;
    otherwise, or when the load is out of balance (the busiest has more than `balance_abs`
    requests in flight above the lightest and more than `balance_rel` times as many), the
    least loaded worker takes it. Either way the chosen worker's index learns the prompt.
    """

    name = "cache_aware"

    def __init__(
        self, min_match: float = 0.5, balance_abs: int = 8, balance_rel: float = 1.5
    ) -> None:
        self.min_match = min_match
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self._least_loaded = LeastLoaded()
        self._indexes: dict[str, ApproxPrefixIndex] = {}

    def _index(self, worker_id: str) -> ApproxPrefixIndex:
        if worker_id not in self._indexes:
            self._indexes[worker_id] = ApproxPrefixIndex()
        return self._indexes[worker_id]

    def pick(self, workers: Sequence[WorkerState], prompt_text: str) -> WorkerState:
        hashes = block_hashes(prompt_text)
        chosen = self._least_loaded.pick(workers, prompt_text)
        if hashes and not out_of_balance(workers, self.balance_abs, self.balance_rel):
            matches = {w.worker_id: self._index(w.worker_id).match(hashes) for w in workers}
            best = max(workers, key=lambda w: (matches[w.worker_id], -w.load, w.worker_id))
            if matches[best.worker_id] >= self.min_match * len(hashes):
                chosen = best
        self._index(chosen.worker_id).insert(hashes)
        return chosen

    def forget(self, worker_id: str) -> None:
        self._indexes.pop(worker_id, None)


class ExactPrefix(RoutingPolicy):
    """Send a prompt to the worker that holds most of its leading pages, as the workers'
    own KV events say (gateway/kv_index.py, fed by gateway/kv_subscriber.py).

    Pages in a worker's disk tier (medium DISK) count as held, since it reads them back
    instead of computing them; between equal holders the one with more in memory wins.
    The gateway has no tokenizer, so the prompt's token ids come from a worker first
    (gateway/kv_routing.py); their chained page hashes (common/kv_events.py) are the ones
    the workers publish. The worker holding most of them wins if that covers at least
    `min_match` of the prompt; when none does (the prefix is new, or was evicted), the
    worker the prefix was sent to before takes it again, so that each prefix stays on one
    worker and each cache holds its share of them rather than all of them in turn; else the
    least loaded. Ties go to where the prefix was sent before, then to the lighter worker,
    and the load guard of CacheAware overrides it all. The chosen worker is expected to
    hold the prompt's pages from now on, until its events say otherwise, so the same prefix
    arriving meanwhile goes there too. Without token ids (no candidate publishes events, or
    none tokenized the prompt in time) it routes as CacheAware does, on the prompt's text.
    """

    name = "exact"

    def __init__(
        self, min_match: float = 0.5, balance_abs: int = 8, balance_rel: float = 1.5
    ) -> None:
        self.min_match = min_match
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.index = KvIndex()
        self._sent: dict[str, ApproxPrefixIndex] = {}  # page hashes routed to each worker
        self._least_loaded = LeastLoaded()
        self._by_text = CacheAware(min_match, balance_abs, balance_rel)

    def pick(self, workers: Sequence[WorkerState], prompt_text: str) -> WorkerState:
        return self._by_text.pick(workers, prompt_text)

    def pick_tokens(
        self, workers: Sequence[WorkerState], token_ids: Sequence[int], now: float
    ) -> WorkerState:
        by_size: dict[int, list[int]] = {}
        for w in workers:
            if w.page_size not in by_size:
                by_size[w.page_size] = prompt_block_hashes(token_ids, w.page_size)
        chosen = self._least_loaded.pick(workers, "")
        if not out_of_balance(workers, self.balance_abs, self.balance_rel):
            # A worker never reuses a prompt's last token: it computes it to sample.
            reusable = max(0, len(token_ids) - 1)

            def tokens(w: WorkerState, pages: int) -> int:
                return min(pages * w.page_size, reusable - reusable % w.page_size)

            held, in_memory, sent = {}, {}, {}
            for w in workers:
                hashes, index = by_size[w.page_size], self.index
                held[w.worker_id] = tokens(w, index.match(w.worker_id, hashes, now, disk=True))
                in_memory[w.worker_id] = tokens(w, index.match(w.worker_id, hashes, now))
                sent[w.worker_id] = tokens(w, self._sent_to(w.worker_id).match(hashes))
            needed = max(1.0, self.min_match * reusable)
            # Pages on disk are read back, not computed: they count as held, memory first.
            holder = max(
                workers,
                key=lambda w: (
                    held[w.worker_id],
                    in_memory[w.worker_id],
                    sent[w.worker_id],
                    -w.load,
                ),
            )
            before = max(workers, key=lambda w: (sent[w.worker_id], -w.load))
            if held[holder.worker_id] >= needed:
                chosen = holder
            elif sent[before.worker_id] >= needed:
                chosen = before
        hashes = by_size[chosen.page_size]
        self.index.expect(chosen.worker_id, hashes, now)
        self._sent_to(chosen.worker_id).insert(hashes)
        return chosen

    def _sent_to(self, worker_id: str) -> ApproxPrefixIndex:
        if worker_id not in self._sent:
            self._sent[worker_id] = ApproxPrefixIndex()
        return self._sent[worker_id]

    def forget(self, worker_id: str) -> None:
        self.index.forget(worker_id)
        self._sent.pop(worker_id, None)
        self._by_text.forget(worker_id)


def out_of_balance(workers: Sequence[WorkerState], balance_abs: int, balance_rel: float) -> bool:
    """The busiest has more than `balance_abs` requests in flight above the lightest and
    more than `balance_rel` times as many."""
    loads = [len(w.in_flight) for w in workers]
    busiest, lightest = max(loads), min(loads)
    return busiest - lightest > balance_abs and busiest > lightest * balance_rel


POLICIES: dict[str, type[RoutingPolicy]] = {
    CacheAware.name: CacheAware,
    ExactPrefix.name: ExactPrefix,
    LeastLoaded.name: LeastLoaded,
    RoundRobin.name: RoundRobin,
}


def make_policy(name: str) -> RoutingPolicy:
    if name not in POLICIES:
        raise ValueError(f"routing must be one of {sorted(POLICIES)}, got {name!r}")
    return POLICIES[name]()
