"""A loopback HTTP proxy for agents that never send `tool_choice` (Claude Code, Codex): it
forces a named tool call on the first request that offers the tool (/v1/messages or
/v1/responses), and on the requests that bring its result back forbids tools and keeps the
answer short (greedy; on /v1/messages ending at the first period or newline: under Claude
Code's small output cap a longer answer would be cut, which Claude Code reports as an error);
everything else goes through as it is. Given `arguments`, the forced call's schema is narrowed
to exactly those (each value the one its grammar allows), so a command an agent runs is known."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

ANSWER_MAX_TOKENS = 200  # the short answer after the result ends well before this
HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


class ForcingProxy:
    """Forward to `upstream`; `bodies` holds each rewritten request body as it was sent on."""

    def __init__(
        self,
        upstream: str,
        tool: str,
        max_tokens: int = 64,
        arguments: dict[str, str] | None = None,
    ) -> None:
        self.upstream = upstream
        self.tool = tool
        self.max_tokens = max_tokens
        self.arguments = arguments
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> ForcingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def rewrite(self, body: dict[str, Any]) -> dict[str, Any]:
        """The forced call until a result comes back (a request retried is forced again);
        then a short text answer."""
        with self._lock:
            if _holds_tool_result(body):
                body["tool_choice"] = {"type": "none"}
                body.update(max_tokens=ANSWER_MAX_TOKENS, stop_sequences=[".", "\n"])
                body["temperature"] = 0
            elif any(tool.get("name") == self.tool for tool in body.get("tools", [])):
                body["tool_choice"] = {"type": "tool", "name": self.tool}
                body["max_tokens"] = self.max_tokens  # room for the call's arguments
                body["temperature"] = 0
            self.bodies.append(body)
        return body

    def rewrite_responses(self, body: dict[str, Any]) -> dict[str, Any]:
        """The same for the Responses API: its function tools, `function_call_output` items."""
        with self._lock:
            items = body.get("input") if isinstance(body.get("input"), list) else []
            if any(item.get("type") == "function_call_output" for item in items):
                body.update(tool_choice="none", temperature=0)
            elif any(tool.get("name") == self.tool for tool in body.get("tools", [])):
                body["tool_choice"] = {"type": "function", "name": self.tool}
                body.update(max_output_tokens=self.max_tokens, temperature=0)
            # Narrowed in every request, so that the answer's prompt starts as the call's did
            # (its prefix cached).
            body["tools"] = [self._narrowed(tool) for tool in body.get("tools", [])]
            self.bodies.append(body)
        return body

    def _narrowed(self, tool: dict[str, Any]) -> dict[str, Any]:
        if tool.get("name") != self.tool or self.arguments is None:
            return tool
        properties = {
            key: {"type": "string", "enum": [value]} for key, value in self.arguments.items()
        }
        schema = {
            "type": "object",
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        }
        return {**tool, "parameters": schema, "strict": True}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._forward(None)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                route = self.path.split("?")[0]
                if route == "/v1/messages":
                    raw = json.dumps(proxy.rewrite(json.loads(raw))).encode()
                elif route == "/v1/responses":
                    raw = json.dumps(proxy.rewrite_responses(json.loads(raw))).encode()
                self._forward(raw)

            def _forward(self, raw: bytes | None) -> None:
                """The answer passed on as it arrives (an SSE stream keeps the client
                waiting through a long prefill, as the server itself does)."""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                url = proxy.upstream + self.path
                with (
                    httpx.Client(timeout=None) as client,
                    client.stream(self.command, url, headers=headers, content=raw) as reply,
                ):
                    self.send_response(reply.status_code)
                    for key, value in reply.headers.items():
                        if key.lower() not in HOP_HEADERS and key.lower() != "content-encoding":
                            self.send_header(key, value)
                    self.end_headers()  # HTTP/1.0: the body ends when the connection closes
                    for chunk in reply.iter_bytes():
                        self.wfile.write(chunk)
                        self.wfile.flush()

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def _holds_tool_result(body: dict[str, Any]) -> bool:
    return any(
        isinstance(block, dict) and block.get("type") == "tool_result"
        for message in body.get("messages", [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
    )
