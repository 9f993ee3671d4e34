"""Which served model a request names: its own name, an alias or a pattern, or the only one
when it names none; the 400 and 404 every route answers otherwise."""

from __future__ import annotations

from collections.abc import Mapping

from common.model_names import resolve_name
from gateway.errors import ErrorKind, GatewayError


def resolve_served(served: Mapping[str, tuple[str, ...]], requested: str | None) -> str:
    """The model among `served` (each model's names, its own first) that `requested` means."""
    if requested is None:
        if len(served) == 1:
            return next(iter(served))
        raise GatewayError.invalid(
            f"model is required when several are served: {', '.join(served)}", "model"
        )
    model = resolve_name(served, requested)
    if model is None:
        listed = ", ".join(name for names in served.values() for name in names)
        raise GatewayError(
            ErrorKind.NOT_FOUND,
            f"model {requested!r} is not served here; available: {listed}",
            param="model",
            code="model_not_found",
        )
    return model
