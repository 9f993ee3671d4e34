"""WorkerRegistry: live workers as learned from Register and Heartbeat messages."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.model_names import resolve_name
from common.schemas import Heartbeat, Register
from common.worker_stats import WorkerStats


@dataclass
class WorkerState:
    worker_id: str
    identity: bytes  # the ZMQ routing identity of its DEALER socket
    incarnation: str
    model: str
    max_context: int
    max_seqs: int
    kv_pages: int
    page_size: int
    pid: int
    host: str
    last_seen: float
    waiting: int = 0
    running: int = 0
    kv_pages_free: int = 0
    prefix_cache_hit_tokens: int = 0
    stats: WorkerStats | None = None  # None until a heartbeat carries figures
    draining: bool = False
    in_flight: set[str] = field(default_factory=set)  # request ids sent and not finished
    aliases: tuple[str, ...] = ()  # other names and trailing-* patterns clients may use
    kv_events: str = ""  # its KV-event PUB address and replay ROUTER address ("": none)
    kv_replay: str = ""
    kv_events_seq: int = -1  # the last KV-event batch it says it published
    kernels: str = ""  # which kernels it runs, as its startup log says

    @property
    def load(self) -> float:
        """Requests per slot, counting what the gateway sent since the last heartbeat."""
        queued = max(self.waiting + self.running, len(self.in_flight))
        return queued / max(1, self.max_seqs)


class WorkerRegistry:
    def __init__(self) -> None:
        self._workers: dict[str, WorkerState] = {}

    def __len__(self) -> int:
        return len(self._workers)

    def get(self, worker_id: str) -> WorkerState | None:
        return self._workers.get(worker_id)

    def register(self, identity: bytes, msg: Register, now: float) -> WorkerState | None:
        """Add or refresh a worker; returns the state it replaced if it is a new incarnation."""
        current = self._workers.get(msg.worker_id)
        if current is not None and current.incarnation == msg.incarnation:
            current.last_seen = now
            current.identity = identity
            return None
        self._workers[msg.worker_id] = WorkerState(
            worker_id=msg.worker_id,
            identity=identity,
            incarnation=msg.incarnation,
            model=msg.model,
            max_context=msg.max_context,
            max_seqs=msg.max_seqs,
            kv_pages=msg.kv_pages,
            page_size=msg.page_size,
            pid=msg.pid,
            host=msg.host,
            last_seen=now,
            kv_pages_free=msg.kv_pages,
            aliases=msg.aliases,
            kv_events=msg.kv_events,
            kv_replay=msg.kv_replay,
            kernels=msg.kernels,
        )
        return current

    def heartbeat(self, msg: Heartbeat, now: float) -> bool:
        """Refresh load figures; False if the sender is unknown or an old incarnation."""
        state = self._workers.get(msg.worker_id)
        if state is None or state.incarnation != msg.incarnation:
            return False
        state.last_seen = now
        state.waiting = msg.waiting
        state.running = msg.running
        state.kv_pages_free = msg.kv_pages_free
        state.prefix_cache_hit_tokens = msg.prefix_cache_hit_tokens
        state.stats = msg.stats
        state.draining = msg.draining
        state.kv_events_seq = msg.kv_events_seq
        return True

    def expire(self, now: float, timeout_s: float) -> list[WorkerState]:
        """Remove and return every worker silent for longer than `timeout_s`."""
        dead = [w for w in self._workers.values() if now - w.last_seen > timeout_s]
        for state in dead:
            del self._workers[state.worker_id]
        return dead

    def remove(self, worker_id: str) -> WorkerState | None:
        return self._workers.pop(worker_id, None)

    def live(self, model: str | None = None) -> list[WorkerState]:
        """Workers that take new requests, for `model` when given."""
        return [
            w
            for w in self._workers.values()
            if not w.draining and (model is None or w.model == model)
        ]

    def all(self) -> list[WorkerState]:
        return list(self._workers.values())

    def models(self) -> list[str]:
        return sorted({w.model for w in self._workers.values()})

    def served_names(self) -> dict[str, tuple[str, ...]]:
        """Each model's names: its own first, then its workers' aliases."""
        names: dict[str, dict[str, None]] = {}
        for w in sorted(self._workers.values(), key=lambda w: w.model):
            names.setdefault(w.model, {w.model: None}).update(dict.fromkeys(w.aliases))
        return {model: tuple(entry) for model, entry in names.items()}

    def resolve(self, requested: str) -> str | None:
        """The model a requested name means (common.model_names.resolve_name; None: none)."""
        return resolve_name(self.served_names(), requested)
