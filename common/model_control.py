"""What `astrai serve` and its gateway tell each other about models: the catalog, load,
unload and status, as msgpack maps over a loopback ZeroMQ socket (DEALER to ROUTER)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import msgpack

OPS = ("catalog", "load", "unload", "status")


@dataclass(frozen=True)
class CatalogModel:
    """One model the launcher can start: what the gateway's policy needs of it."""

    name: str
    aliases: tuple[str, ...]
    ttl_s: float | None  # unloaded after this long with nothing to do (None: never)
    pinned: bool  # never unloaded to make room
    preload: bool  # started with the server
    estimate_mb: int  # its workers' memory before any was measured


@dataclass(frozen=True)
class Catalog:
    models: tuple[CatalogModel, ...]
    budget_mb: int  # the workers' memory, summed over every loaded model, at most
    load_timeout_s: float  # a model's workers register within this, or its load failed


@dataclass(frozen=True)
class ModelProcesses:
    """A model's worker processes as the launcher sees them."""

    running: int  # worker processes alive (starting, serving or stopping)
    rss_mb: float  # their resident memory, summed
    failed: str  # why its last start failed ("": it did not)


def pack(message: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(message, use_bin_type=True)
    return packed


def unpack(frame: bytes) -> dict[str, Any]:
    message = msgpack.unpackb(frame, raw=False)
    if not isinstance(message, dict):
        raise ValueError("a model-control message must be a map")
    return message


def catalog_to_wire(catalog: Catalog) -> dict[str, Any]:
    return dataclasses.asdict(catalog)


def catalog_from_wire(fields: dict[str, Any]) -> Catalog:
    models = tuple(
        CatalogModel(**{**model, "aliases": tuple(model["aliases"])}) for model in fields["models"]
    )
    return Catalog(models, int(fields["budget_mb"]), float(fields["load_timeout_s"]))


def processes_from_wire(fields: dict[str, Any]) -> dict[str, ModelProcesses]:
    return {name: ModelProcesses(**entry) for name, entry in fields.items()}
