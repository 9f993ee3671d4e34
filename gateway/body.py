"""Request bodies and connections: bounded JSON reads and disconnect detection."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from starlette.requests import Request

from gateway.errors import ErrorKind, GatewayError


async def read_json(request: Request, max_bytes: int) -> Any:
    """The request body as JSON, refusing oversized, non-UTF-8 and malformed bodies."""
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
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GatewayError.invalid("request body is not valid UTF-8") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # also absurd numbers and deep nesting
        raise GatewayError.invalid(f"request body is not valid JSON: {exc}") from None


async def wait_disconnect(request: Request) -> None:
    """Returns when the client closes its connection (the body has been read already)."""
    with contextlib.suppress(Exception):
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return
    await asyncio.Event().wait()  # receive() failed: never report a disconnect we did not see
