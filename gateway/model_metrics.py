"""/metrics for `astrai serve`'s models: each model's state and memory, and the budget."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.model_manager import STATES, ModelManager

MIB = 2**20


class ModelCollector(Collector):
    """astrai_model_state{model, state} (1 for the state it is in, 0 for the others, as
    Prometheus' enum convention has it), astrai_model_memory_bytes{model} (its workers'
    resident memory) and astrai_model_memory_budget_bytes."""

    def __init__(self, manager: ModelManager) -> None:
        self.manager = manager

    def collect(self) -> Iterator[Metric]:
        described = self.manager.describe()
        state = GaugeMetricFamily(
            "astrai_model_state",
            "Each model's state (1: the one it is in).",
            labels=["model", "state"],
        )
        memory = GaugeMetricFamily(
            "astrai_model_memory_bytes", "The model's workers' resident memory.", labels=["model"]
        )
        for name, entry in sorted(described.items()):
            for each in STATES:
                state.add_metric([name, each], 1.0 if entry["status"] == each else 0.0)
            memory.add_metric([name], float(entry["memory_mb"]) * MIB)  # type: ignore[arg-type]
        yield state
        yield memory
        budget = self.manager.catalog.budget_mb * MIB
        yield GaugeMetricFamily(
            "astrai_model_memory_budget_bytes",
            "The memory all models' workers may hold together (--memory-budget-mb).",
            value=budget,
        )
