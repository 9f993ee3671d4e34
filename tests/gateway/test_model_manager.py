"""ModelManager against a scripted launcher: loads on demand, the memory budget (least
recently used first, never a pinned or busy model), failed loads, idle TTLs and names."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from common.model_control import Catalog, CatalogModel, ModelProcesses
from common.schemas import Register
from gateway.errors import ErrorKind, GatewayError
from gateway.model_manager import ModelManager
from gateway.model_metrics import ModelCollector
from gateway.prometheus import render_prometheus
from gateway.registry import WorkerRegistry
from gateway.stats import GatewayMetrics


def model(name: str, estimate: int = 600, **fields: Any) -> CatalogModel:
    values: dict[str, Any] = {"aliases": (), "ttl_s": None, "pinned": False, "preload": False}
    return CatalogModel(name=name, estimate_mb=estimate, **(values | fields))


class ScriptedLauncher:
    """The launcher's answers: a load starts the model's processes at `rss_mb` (its worker
    registers when the test says so, or at once with `register_on_load`); an unload stops them."""

    def __init__(self, catalog: Catalog, registry: WorkerRegistry, rss_mb: float = 500.0) -> None:
        self.catalog_, self.registry, self.rss_mb = catalog, registry, rss_mb
        self.running: dict[str, ModelProcesses] = {}
        self.register_on_load = True
        self.fail_next = ""
        self.calls: list[tuple[str, str]] = []

    async def catalog(self) -> Catalog:
        return self.catalog_

    async def status(self) -> dict[str, ModelProcesses]:
        idle = ModelProcesses(0, 0.0, "")
        return {m.name: self.running.get(m.name, idle) for m in self.catalog_.models}

    async def load(self, name: str) -> None:
        self.calls.append(("load", name))
        if self.fail_next:
            self.running[name] = ModelProcesses(0, 0.0, self.fail_next)
            return
        self.running[name] = ModelProcesses(1, self.rss_mb, "")
        if self.register_on_load:
            register_worker(self.registry, name)

    async def unload(self, name: str) -> None:
        self.calls.append(("unload", name))
        self.running.pop(name, None)
        self.registry.remove(f"{name}-0")

    def close(self) -> None:
        pass


def register_worker(registry: WorkerRegistry, name: str) -> None:
    message = Register(f"{name}-0", "i", name, 512, 4, 100, 16, 1, "h")
    registry.register(message.worker_id.encode(), message, 0.0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def started(*models: CatalogModel, budget: int = 10_000) -> tuple[ModelManager, Any]:
    registry = WorkerRegistry()
    launcher = ScriptedLauncher(Catalog(models, budget, 30.0), registry)
    manager = ModelManager(launcher, registry, clock=Clock())  # type: ignore[arg-type]
    await manager.start()
    return manager, launcher


async def test_a_model_not_running_is_loaded_and_the_request_goes_on_once_it_registers():
    manager, launcher = await started(model("a"), model("b"))
    launcher.register_on_load = False
    waiting = asyncio.ensure_future(manager.ensure("b", manager.clock(), 30.0))
    await asyncio.sleep(0.1)
    assert not waiting.done() and manager.state("b") == "loading"
    assert manager.describe()["b"]["status"] == "loading"
    register_worker(manager.registry, "b")
    await asyncio.wait_for(waiting, 2)
    assert manager.state("b") == "loaded" and launcher.calls == [("load", "b")]
    await manager.ensure("b", manager.clock(), 30.0)  # loaded: nothing more asked
    assert launcher.calls == [("load", "b")]
    await manager.stop()


async def test_the_least_recently_used_idle_model_is_unloaded_to_make_room():
    manager, launcher = await started(model("a"), model("b"), model("c"), budget=1200)
    await manager.ensure("a", manager.clock(), 30.0)
    manager.clock.now += 10
    await manager.ensure("b", manager.clock(), 30.0)
    manager.clock.now += 10
    await manager.ensure("c", manager.clock(), 30.0)  # 500 + 500 held, 600 more: one goes
    assert ("unload", "a") in launcher.calls and ("unload", "b") not in launcher.calls
    assert [manager.state(m) for m in "abc"] == ["unloaded", "loaded", "loaded"]
    await manager.stop()


async def test_a_pinned_or_busy_model_stays_and_what_cannot_fit_is_a_503_naming_the_budget():
    manager, launcher = await started(model("a", pinned=True), model("b"), model("c"), budget=1200)
    await manager.ensure("a", manager.clock(), 30.0)
    await manager.ensure("b", manager.clock(), 30.0)
    manager.registry.get("b-0").in_flight.add("req-1")  # a request runs on b
    with pytest.raises(GatewayError) as refused:
        await manager.ensure("c", manager.clock(), 30.0)
    error = refused.value
    assert error.kind is ErrorKind.NO_MEMORY and error.code == "model_does_not_fit"
    assert "1200 MiB (--memory-budget-mb)" in error.message and error.param == "model"
    assert ("unload", "a") not in launcher.calls and ("unload", "b") not in launcher.calls
    assert manager.state("c") == "unloaded"
    await manager.stop()


async def test_a_failed_load_is_a_503_with_the_launchers_reason_and_the_next_request_retries():
    manager, launcher = await started(model("a"), model("b"))
    launcher.fail_next = "its worker cannot load the model (exit 3; see the log)"
    with pytest.raises(GatewayError) as failed:
        await manager.ensure("b", manager.clock(), 30.0)
    assert failed.value.kind is ErrorKind.UNAVAILABLE
    assert "failed to load: its worker cannot load the model" in failed.value.message
    assert manager.state("b") == "failed"
    launcher.fail_next = ""
    await manager.ensure("b", manager.clock(), 30.0)
    assert manager.state("b") == "loaded"
    await manager.stop()


async def test_an_idle_model_is_unloaded_after_its_ttl_and_a_used_one_is_not():
    manager, launcher = await started(model("a", ttl_s=60.0), model("b", ttl_s=60.0))
    await manager.ensure("a", manager.clock(), 30.0)
    await manager.ensure("b", manager.clock(), 30.0)
    manager.registry.get("b-0").in_flight.add("req-1")
    manager.clock.now += 61
    await manager._unload_idle()
    assert launcher.calls[-1] == ("unload", "a") and manager.state("b") == "loaded"
    await manager._refresh()
    assert manager.state("a") == "unloaded"
    await manager.stop()


async def test_names_aliases_and_patterns_resolve_and_a_missing_model_is_named():
    manager, _ = await started(model("a", aliases=("alpha", "claude-*")), model("b"))
    assert manager.resolve("alpha") == "a" and manager.resolve("claude-sonnet-4") == "a"
    with pytest.raises(GatewayError) as missing:
        manager.resolve("nope")
    assert missing.value.kind is ErrorKind.NOT_FOUND and missing.value.code == "model_not_found"
    assert "available: a, alpha, claude-*, b" in missing.value.message
    with pytest.raises(GatewayError, match="model is required when several are served"):
        manager.resolve(None)
    await manager.stop()


async def test_metrics_show_each_models_state_memory_and_the_budget():
    manager, _ = await started(model("a"), model("b"), budget=1200)
    await manager.ensure("b", manager.clock(), 30.0)
    text = render_prometheus(
        manager.registry, GatewayMetrics(), Counter(), ModelCollector(manager)
    ).decode()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert samples[("astrai_model_state", (("model", "b"), ("state", "loaded")))] == 1.0
    assert samples[("astrai_model_state", (("model", "a"), ("state", "unloaded")))] == 1.0
    assert samples[("astrai_model_state", (("model", "a"), ("state", "loaded")))] == 0.0
    assert samples[("astrai_model_memory_bytes", (("model", "b"),))] == 500.0 * 2**20
    assert samples[("astrai_model_memory_budget_bytes", ())] == 1200.0 * 2**20
    await manager.stop()
