"""uvicorn's HTTP protocol with a deadline on each request's head, which uvicorn lacks.

Why: a client may open a connection and send its request line and headers a byte at a time,
or nothing at all; uvicorn waits for it forever (its keep-alive timeout only runs between
requests). Past the deadline such a client gets a 408 and its connection is closed. The body
has its own deadline in the application (gateway/body.py), where the protocol is known.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_BODY = json.dumps(
    {
        "error": {
            "message": "the request head (request line and headers) took too long to arrive",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
).encode()
RESPONSE_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BODY), _BODY)
)


def head_deadline_protocol(
    timeout_s: float, on_timeout: Callable[[], None]
) -> type[HttpToolsProtocol]:
    """An HttpToolsProtocol class whose connections get `timeout_s` for each request's head
    (from the connection, then from each next request's first byte); `on_timeout` counts."""

    class HeadDeadlineProtocol(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._head_timer is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._head_timer = self.loop.call_later(timeout_s, self._head_timed_out)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing():
                return
            on_timeout()
            self.transport.write(RESPONSE_408)
            self.transport.close()

    return HeadDeadlineProtocol
