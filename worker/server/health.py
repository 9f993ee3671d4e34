"""A worker's probe endpoints for orchestrators: /live (I/O loop turning), /ready (serving)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HealthServer:
    """Serves GET /live and /ready on its own thread; 200 when the check holds, else 503."""

    def __init__(
        self, host: str, port: int, is_live: Callable[[], bool], is_ready: Callable[[], bool]
    ) -> None:
        checks = {"/live": is_live, "/ready": is_ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                check = checks.get(self.path)
                status = 404 if check is None else (200 if check() else 503)
                body = {200: b"ok\n", 404: b"not found\n"}.get(status, b"unavailable\n")
                self.send_response(status)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # probes every few seconds: quiet
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="worker-health", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
