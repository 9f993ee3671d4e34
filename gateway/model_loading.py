"""A request's model under `astrai serve`: named, loaded if it is not running (the request
waits, and a client that leaves meanwhile frees its place), and the routes that load,
unload and list the models."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from gateway.body import read_json, wait_disconnect
from gateway.errors import GatewayError
from gateway.model_manager import ModelManager
from gateway.services import RequestServices


async def await_loaded(
    services: RequestServices, requested: str | None, started_at: float, request: Request | None
) -> str:
    """The model a request names, once a worker of it is live; ClientDisconnect if the
    client leaves while it loads."""
    manager = services.models
    assert manager is not None
    model = manager.resolve(requested)
    if manager.loaded(model):
        manager.models[model].last_used = manager.clock()
        return model
    loading = asyncio.ensure_future(
        manager.ensure(model, started_at, services.config.queue_timeout_s)
    )
    if request is None:
        await loading
        return model
    gone = asyncio.ensure_future(wait_disconnect(request))
    try:
        await asyncio.wait({loading, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not loading.done():
        loading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loading
        raise ClientDisconnect()
    loading.result()  # its error, if it failed
    return model


def model_entries(
    served: Mapping[str, tuple[str, ...]],
    created: int,
    described: Mapping[str, Mapping[str, object]] | None = None,
) -> list[dict[str, Any]]:
    """`/v1/models`' data: every name a client may send, each model's own first, `root`
    the model it means; with `described` (`astrai serve`'s models), `status` whether it runs
    (as llama-server's router lists them) and its memory."""
    entries = []
    for model, names in served.items():
        state: dict[str, Any] = {}
        if described is not None:
            state = {
                "status": {"value": described[model]["status"]},
                "memory_mb": described[model]["memory_mb"],
            }
        for name in names:
            base = {"id": name, "object": "model", "created": created, "owned_by": "astrai"}
            entries.append({**base, "root": model, **state})
    return entries


async def _named_model(request: Request, services: RequestServices) -> tuple[ModelManager, str]:
    """The manager and the model a /models/load or /models/unload body names (the route
    checked the API key)."""
    manager = services.models
    if manager is None:
        raise GatewayError.invalid(
            "this gateway loads no model itself: its workers come and go on their own", "model"
        )
    body = await read_json(request, services.config.max_body_bytes, services.config.body_timeout_s)
    requested = body.get("model") if isinstance(body, dict) else None
    if not isinstance(requested, str) or not requested:
        raise GatewayError.invalid("model (a served model's name) is required", "model")
    return manager, manager.resolve(requested)


async def load_model(request: Request, services: RequestServices) -> Response:
    """POST /models/load {"model": NAME}: answered once it is loaded (or could not be)."""
    manager, model = await _named_model(request, services)
    await await_loaded(services, model, manager.clock(), request)
    return JSONResponse({"success": True, "model": model, **manager.describe()[model]})


async def unload_model(request: Request, services: RequestServices) -> Response:
    """POST /models/unload {"model": NAME}: its workers finish what they run, then exit."""
    manager, model = await _named_model(request, services)
    await manager.unload(model)
    return JSONResponse({"success": True, "model": model, **manager.describe()[model]})
