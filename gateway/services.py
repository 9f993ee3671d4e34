"""RequestServices: what every API request's handling shares (workers, routing, slots, counts)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.admission import AdmissionControl
from gateway.config import GatewayConfig
from gateway.model_manager import ModelManager
from gateway.registry import WorkerRegistry
from gateway.router import RoutingPolicy
from gateway.stats import GatewayMetrics
from gateway.workers import WorkerHub


@dataclass(frozen=True)
class RequestServices:
    """One per gateway, handed to each protocol's handler and each request it starts."""

    hub: WorkerHub
    registry: WorkerRegistry
    policy: RoutingPolicy
    metrics: GatewayMetrics
    config: GatewayConfig
    admission: AdmissionControl
    models: ModelManager | None = None  # `astrai serve`'s models, loaded on demand
