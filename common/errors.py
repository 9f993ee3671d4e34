"""RequestError: one request's bad input, named by parameter; both sides raise it."""

from __future__ import annotations


class RequestError(ValueError):
    """Bad input for one request; the engine is untouched and goes on serving others."""

    code = "invalid_request"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
