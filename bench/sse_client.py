"""A lean HTTP/1.1 client for the load generator: one POST, its streamed body read line by line.

Why not httpx: on the 2-core machines these benchmarks run on, the client shares the CPU with
the server it measures. httpx's streaming (httpcore, anyio, h11) cost ~1 ms of CPU per SSE
event, a fifth of a core at 8 streams, taken from whichever server is being measured and more
from the faster one. Plain asyncio streams need a tenth of that.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MAX_HEADER_LINES = 100


class HTTPStreamError(Exception):
    """The server broke the HTTP framing or closed the connection early."""


@dataclass
class StreamedResponse:
    """A response whose status and headers are read, body not yet."""

    status: int
    headers: dict[str, str]
    _reader: asyncio.StreamReader

    async def lines(self) -> AsyncIterator[str]:
        """The body's lines without their line ends, de-chunked as it arrives."""
        pending = b""
        async for piece in self._pieces():
            pending += piece
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.rstrip(b"\r").decode("utf-8", errors="replace")
        if pending:
            yield pending.rstrip(b"\r").decode("utf-8", errors="replace")

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self._pieces()])

    async def _pieces(self) -> AsyncIterator[bytes]:
        reader = self._reader
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size_line = await reader.readline()
                if not size_line:
                    raise HTTPStreamError("connection closed inside a chunked body")
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readline()).strip():  # trailers, then the blank line
                        pass
                    return
                yield await reader.readexactly(size)
                await reader.readexactly(2)  # the CRLF after each chunk
        elif "content-length" in self.headers:
            yield await reader.readexactly(int(self.headers["content-length"]))
        else:  # delimited by the connection's close
            while piece := await reader.read(65536):
                yield piece


class StreamingPost:
    """`async with StreamingPost(base, path, body, headers) as response:` one request on a
    fresh connection (closed on exit)."""

    def __init__(
        self, base_url: str, path: str, body: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https"):
            raise ValueError(f"the server URL must be http:// or https://, got {base_url!r}")
        self._tls = url.scheme == "https"
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (443 if self._tls else 80)
        self._path = url.path.rstrip("/") + path
        self._body = json.dumps(body).encode()
        self._headers = dict(headers or {})
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> StreamedResponse:
        context = ssl.create_default_context() if self._tls else None
        reader, self._writer = await asyncio.open_connection(self._host, self._port, ssl=context)
        head = [
            f"POST {self._path} HTTP/1.1",
            f"Host: {self._host}:{self._port}",
            "Content-Type: application/json",
            "Accept: text/event-stream",
            f"Content-Length: {len(self._body)}",
            "Connection: close",
            *(f"{name}: {value}" for name, value in self._headers.items()),
        ]
        self._writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + self._body)
        await self._writer.drain()
        status_line = await reader.readline()
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise HTTPStreamError(f"not an HTTP response: {status_line[:80]!r}")
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADER_LINES):
            line = (await reader.readline()).strip()
            if not line:
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return StreamedResponse(int(parts[1]), headers, reader)

    async def __aexit__(self, *_: object) -> None:
        if self._writer is not None:
            self._writer.close()
            # The server may have closed first: nothing is left to flush then.
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await self._writer.wait_closed()
