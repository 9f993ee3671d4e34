"""GatewayError and the one place that renders errors as OpenAI or Anthropic bodies."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class ErrorKind(Enum):
    """(HTTP status for OpenAI, HTTP status for Anthropic, OpenAI type, Anthropic type)."""

    INVALID_REQUEST = (400, 400, "invalid_request_error", "invalid_request_error")
    AUTHENTICATION = (401, 401, "authentication_error", "authentication_error")
    NOT_FOUND = (404, 404, "invalid_request_error", "not_found_error")
    PAYLOAD_TOO_LARGE = (413, 413, "invalid_request_error", "request_too_large")
    REQUEST_TIMEOUT = (408, 408, "invalid_request_error", "invalid_request_error")  # slow body
    UNSUPPORTED_MEDIA_TYPE = (415, 415, "invalid_request_error", "invalid_request_error")
    RATE_LIMITED = (429, 529, "rate_limit_error", "overloaded_error")  # gateway queue full
    UNAVAILABLE = (503, 529, "server_error", "overloaded_error")  # no worker can take it
    NO_MEMORY = (503, 503, "server_error", "api_error")  # a model the memory budget cannot hold
    INTERNAL = (500, 500, "server_error", "api_error")

    @property
    def openai_status(self) -> int:
        return self.value[0]

    @property
    def anthropic_status(self) -> int:
        return self.value[1]


@dataclass
class GatewayError(Exception):
    """A request-level failure; the protocol builder renders it in its own shape."""

    kind: ErrorKind
    message: str
    param: str | None = None
    code: str | None = None  # OpenAI's `code`, e.g. context_length_exceeded, model_not_found
    retry_after_s: float | None = None
    close_connection: bool = False  # the client cannot be trusted to send a next request

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @classmethod
    def invalid(
        cls, message: str, param: str | None = None, code: str | None = None
    ) -> GatewayError:
        return cls(ErrorKind.INVALID_REQUEST, message, param, code)


def openai_error(error: GatewayError) -> tuple[int, dict[str, Any]]:
    """`{"error": {"message", "type", "param", "code"}}`."""
    body = {
        "error": {
            "message": error.message,
            "type": error.kind.value[2],
            "param": error.param,
            "code": error.code,
        }
    }
    return error.kind.openai_status, body


def anthropic_error(error: GatewayError) -> tuple[int, dict[str, Any]]:
    """`{"type": "error", "error": {"type", "message"}}`."""
    body = {"type": "error", "error": {"type": error.kind.value[3], "message": error.message}}
    return error.kind.anthropic_status, body
