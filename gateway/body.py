"""Request bodies and connections: bounded JSON reads and disconnect detection."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from starlette.requests import Request

from gateway.errors import ErrorKind, GatewayError


async def read_json(request: Request, max_bytes: int, timeout_s: float | None = None) -> Any:
    """The request body as JSON, refusing oversized, slow (more than `timeout_s` to arrive:
    408, and the connection is closed), non-JSON (415), non-UTF-8 and malformed bodies."""
    media_type = _media_type(request.headers.get("content-type"))
    if media_type is not None and not _is_json(media_type):
        raise GatewayError(
            ErrorKind.UNSUPPORTED_MEDIA_TYPE,
            f"the body must be JSON (Content-Type: application/json), got {media_type!r}",
        )
    try:
        raw = await asyncio.wait_for(_read_bytes(request, max_bytes), timeout_s)
    except asyncio.TimeoutError:
        raise GatewayError(
            ErrorKind.REQUEST_TIMEOUT,
            f"the request body took longer than {timeout_s:g} s to arrive",
            close_connection=True,
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GatewayError.invalid("request body is not valid UTF-8") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # also absurd numbers and deep nesting
        raise GatewayError.invalid(f"request body is not valid JSON: {exc}") from None


def _media_type(content_type: str | None) -> str | None:
    if content_type is None:
        return None  # a bare client: the body must still parse as JSON
    return content_type.split(";", 1)[0].strip().lower()


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")


async def _read_bytes(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise GatewayError(ErrorKind.PAYLOAD_TOO_LARGE, f"request body exceeds {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise GatewayError(
                ErrorKind.PAYLOAD_TOO_LARGE, f"request body exceeds {max_bytes} bytes"
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def wait_disconnect(request: Request) -> None:
    """Returns when the client closes its connection (the body has been read already)."""
    with contextlib.suppress(Exception):
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return
    await asyncio.Event().wait()  # receive() failed: never report a disconnect we did not see
