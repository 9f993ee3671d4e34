"""ModelManager: which of `astrai serve`'s models run, loaded on a request's demand within a
memory budget (the least recently used unloaded first, never a pinned or busy one), and
unloaded after their idle TTL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.model_control import Catalog, CatalogModel, ModelProcesses
from gateway.errors import ErrorKind, GatewayError
from gateway.model_control_client import ModelControlClient, ModelControlError
from gateway.registry import WorkerRegistry
from gateway.served_models import resolve_served

log = logging.getLogger(__name__)
WATCH_INTERVAL_S = 0.5  # how often the processes' status, memory and idle times are read
WAIT_POLL_S = 0.05
CATALOG_ATTEMPTS = 12  # the launcher answers from its loop within a nap: a minute is plenty
STATES = ("loaded", "loading", "unloading", "unloaded", "failed")


@dataclass
class ModelState:
    """What the gateway keeps of one model between the launcher's status reports."""

    entry: CatalogModel
    processes: ModelProcesses
    last_used: float = 0.0
    waiting: int = 0  # requests waiting for it to load
    peak_mb: float = 0.0  # the most its workers were measured at once loaded
    unloading: bool = False


class ModelManager:
    def __init__(
        self,
        control: ModelControlClient,
        registry: WorkerRegistry,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.control, self.registry, self.clock = control, registry, clock
        self.catalog = Catalog((), 0, 0.0)
        self.models: dict[str, ModelState] = {}
        self._lock = asyncio.Lock()  # one load decision at a time: the budget is shared
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for attempt in range(CATALOG_ATTEMPTS):
            try:
                self.catalog = await self.control.catalog()
                break
            except ModelControlError:
                if attempt == CATALOG_ATTEMPTS - 1:
                    raise
        idle = ModelProcesses(0, 0.0, "")
        now = self.clock()
        self.models = {m.name: ModelState(m, idle, last_used=now) for m in self.catalog.models}
        self._watch = asyncio.ensure_future(self._watch_loop())

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        self.control.close()

    # -- names --------------------------------------------------------------------------------
    def served_names(self) -> dict[str, tuple[str, ...]]:
        return {name: (name, *s.entry.aliases) for name, s in self.models.items()}

    def resolve(self, requested: str | None) -> str:
        """The catalog's model a request names (or the only one); else a 400 / 404."""
        return resolve_served(self.served_names(), requested)

    # -- state --------------------------------------------------------------------------------
    def loaded(self, model: str) -> bool:
        return bool(self.registry.live(model))

    def state(self, model: str) -> str:
        entry = self.models[model]
        if entry.processes.running == 0:
            return "failed" if entry.processes.failed else "unloaded"
        if entry.unloading:
            return "unloading"
        return "loaded" if self.loaded(model) else "loading"

    def in_use(self, model: str) -> bool:
        """Requests run on it or wait for it."""
        busy = any(w.in_flight for w in self.registry.all() if w.model == model)
        return busy or self.models[model].waiting > 0

    def expects_workers(self) -> bool:
        """Some model is meant to run (so no live worker means not ready)."""
        return any(s.entry.preload or s.processes.running for s in self.models.values())

    def describe(self) -> dict[str, dict[str, object]]:
        """Per model: its state, memory now and at most, pin, TTL, idle seconds."""
        now = self.clock()
        return {
            name: {
                "status": self.state(name),
                "memory_mb": round(s.processes.rss_mb, 1),
                "peak_memory_mb": round(s.peak_mb, 1),
                "estimate_mb": s.entry.estimate_mb,
                "pinned": s.entry.pinned,
                "ttl_s": s.entry.ttl_s,
                "idle_s": round(now - s.last_used, 1),
                "failed": s.processes.failed or None,
            }
            for name, s in self.models.items()
        }

    # -- loading ------------------------------------------------------------------------------
    async def ensure(self, model: str, started_at: float, queue_timeout_s: float) -> None:
        """Return once a worker of `model` is live, loading it if it is not running: a
        request waits for a load (or a worker's restart, a load too) up to the longer of its
        queue timeout and the load timeout, from `started_at`; a load that fails or does not
        fit is a 503."""
        entry = self.models[model]
        entry.last_used = self.clock()
        if self.loaded(model):
            return
        entry.waiting += 1
        try:
            if entry.processes.running == 0 or entry.unloading:
                await self.load(model)
            deadline = started_at + max(queue_timeout_s, self.catalog.load_timeout_s)
            while not self.loaded(model):
                if entry.processes.failed:
                    raise GatewayError(
                        ErrorKind.UNAVAILABLE,
                        f"model {model!r} failed to load: {entry.processes.failed}",
                        param="model",
                    )
                if self.clock() > deadline:
                    raise GatewayError(
                        ErrorKind.UNAVAILABLE,
                        f"model {model!r} did not load within {self.catalog.load_timeout_s} s",
                        param="model",
                    )
                await asyncio.sleep(WAIT_POLL_S)
        finally:
            entry.waiting -= 1
            entry.last_used = self.clock()

    async def load(self, model: str) -> None:
        """Start `model`'s workers (unless they run), unloading others first if the budget
        needs it; they register with the gateway on their own."""
        async with self._lock:
            try:
                await self._refresh()
                entry = self.models[model]
                if entry.processes.running and not entry.unloading:
                    return
                await self._wait_stopped([model])  # an unload under way finishes first
                await self._make_room(model)
                await self.control.load(model)
                await self._refresh()  # its processes run from here on
            except ModelControlError as exc:
                raise GatewayError(ErrorKind.INTERNAL, f"cannot load {model!r}: {exc}") from None
            log.info("model %s: loading", model)

    async def unload(self, model: str) -> None:
        """Stop `model`'s workers (each finishes what it runs first)."""
        entry = self.models[model]
        if entry.processes.running == 0:
            return
        entry.unloading = True
        for worker in self.registry.all():  # no new request goes there, from now on
            if worker.model == model:
                worker.draining = True
        try:
            await self.control.unload(model)
        except ModelControlError as exc:
            raise GatewayError(ErrorKind.INTERNAL, f"cannot unload {model!r}: {exc}") from None
        log.info("model %s: unloading", model)

    def _expected_mb(self, model: str) -> float:
        entry = self.models[model]
        return entry.peak_mb or float(entry.entry.estimate_mb)

    def _held_mb(self, model: str) -> float:
        """What a running model holds: its workers' memory once loaded, while loading the
        most it is expected to reach."""
        entry = self.models[model]
        if self.loaded(model):
            return entry.processes.rss_mb
        return max(entry.processes.rss_mb, self._expected_mb(model))

    async def _make_room(self, model: str) -> None:
        """Unload the least recently used idle, unpinned models until `model` fits."""
        budget, need = self.catalog.budget_mb, self._expected_mb(model)
        running = [m for m, s in self.models.items() if s.processes.running and m != model]
        held = {m: self._held_mb(m) for m in running}
        victims = sorted(
            (m for m in running if not self.models[m].entry.pinned and not self.in_use(m)),
            key=lambda m: self.models[m].last_used,
        )
        chosen = []
        while sum(held.values()) + need > budget and victims:
            victim = victims.pop(0)
            chosen.append(victim)
            held.pop(victim)
        if sum(held.values()) + need > budget:
            raise GatewayError(
                ErrorKind.NO_MEMORY,
                f"model {model!r} needs about {need:.0f} MiB and the memory budget is "
                f"{budget} MiB (--memory-budget-mb): {sum(held.values()):.0f} MiB are held by "
                f"models in use or pinned ({', '.join(held) or 'none'})",
                param="model",
                code="model_does_not_fit",
            )
        for victim in chosen:
            await self.unload(victim)
        await self._wait_stopped(chosen)

    async def _wait_stopped(self, models: list[str]) -> None:
        """Until none of `models` has a process left (their memory is back)."""
        deadline = self.clock() + self.catalog.load_timeout_s
        while any(self.models[m].unloading for m in models):
            if self.clock() > deadline:
                raise GatewayError(ErrorKind.INTERNAL, f"{', '.join(models)} did not stop")
            await asyncio.sleep(WATCH_INTERVAL_S / 5)
            await self._refresh()

    # -- watching -----------------------------------------------------------------------------
    async def _refresh(self) -> None:
        status = await self.control.status()
        for name, processes in status.items():
            entry = self.models.get(name)
            if entry is None:
                continue
            entry.processes = processes
            if processes.running == 0:
                entry.unloading = False
            if self.loaded(name) and not entry.unloading:
                entry.peak_mb = max(entry.peak_mb, processes.rss_mb)

    async def _watch_loop(self) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            try:
                await self._refresh()
                await self._unload_idle()
            except (ModelControlError, GatewayError) as exc:
                log.warning("model control: %s", exc)
            except Exception:  # the watch must outlive any one failure
                log.exception("model control: the watch failed; it goes on")

    async def _unload_idle(self) -> None:
        now = self.clock()
        for name, entry in self.models.items():
            if self.in_use(name):
                entry.last_used = now
                continue
            ttl = entry.entry.ttl_s
            idle = now - entry.last_used
            if ttl is not None and entry.processes.running and not entry.unloading and idle > ttl:
                log.info("model %s: idle for %.0f s (ttl %s s)", name, idle, ttl)
                await self.unload(name)
