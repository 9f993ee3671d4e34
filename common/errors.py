"""RequestError: one request's bad input, named by parameter; both sides raise it. RejectCode:
why a worker refused a request, as Rejected carries it."""

from __future__ import annotations

from common.text_enum import TextEnum


class RejectCode(TextEnum):
    """Why a worker refused a request before doing any work for it."""

    INVALID_REQUEST = "invalid_request"
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
    DRAINING = "draining"  # shutting down: the gateway tries another worker
    OVERLOADED = "overloaded"  # the gateway answers 503 (no worker sends it yet)
    INTERNAL = "internal"


class RequestError(ValueError):
    """Bad input for one request; the engine is untouched and goes on serving others."""

    code = RejectCode.INVALID_REQUEST

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
