"""Request ids on every response, and JSON (not plain text) for unknown routes and methods."""

from __future__ import annotations

import re
import uuid
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import ErrorKind, GatewayError, anthropic_error, openai_error

# A client's id is echoed only when it is a plain token of sane length (it goes in a header).
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestIdMiddleware:
    """Echo `X-Request-Id` when the client sent one, else give each request a fresh id; on
    Anthropic's routes the same id also goes out as `request-id`, as Anthropic sends it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _CLIENT_ID.match(given) else f"req_{uuid.uuid4().hex}"
        extra = [(b"x-request-id", request_id.encode())]
        if scope["path"].startswith("/v1/messages"):
            extra.append((b"request-id", request_id.encode()))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_id)


async def http_error(request: Request, exc: Any) -> Response:
    """Starlette's 404 and 405 in the protocol's own error shape."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        error = GatewayError(ErrorKind.NOT_FOUND, f"no route {request.method} {request.url.path}")
    elif status == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
        error = GatewayError.invalid(message)
    else:
        error = GatewayError(ErrorKind.INTERNAL, str(getattr(exc, "detail", "")) or "error")
    if request.url.path.startswith("/v1/messages"):
        _, body = anthropic_error(error)
    else:
        _, body = openai_error(error)
    headers = getattr(exc, "headers", None) or {}
    return JSONResponse(body, status_code=status, headers=headers)
