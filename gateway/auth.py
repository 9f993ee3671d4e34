"""Optional API key: `Authorization: Bearer KEY` or `x-api-key: KEY`, compared in constant time."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from gateway.errors import ErrorKind, GatewayError


def check_api_key(request: Request, api_key: str | None) -> None:
    """Raise a 401 GatewayError unless the request carries the key (no key set: open)."""
    if api_key is None:
        return
    offered = request.headers.get("x-api-key")
    authorization = request.headers.get("authorization", "")
    if offered is None and authorization[:7].lower() == "bearer ":
        offered = authorization[7:].strip()
    if offered is None or not hmac.compare_digest(offered.encode(), api_key.encode()):
        raise GatewayError(
            ErrorKind.AUTHENTICATION,
            "invalid or missing API key (use Authorization: Bearer KEY or x-api-key: KEY)",
            code="invalid_api_key",
        )
