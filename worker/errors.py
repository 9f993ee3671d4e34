"""Per-request errors: the request is refused with a code and the parameter at fault."""

from __future__ import annotations


class RequestError(ValueError):
    """Bad input for one request; the engine is untouched and goes on serving others."""

    code = "invalid_request"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ContextLengthExceeded(RequestError):
    """The prompt, or prompt + max_tokens, does not fit the model's context."""

    code = "context_length_exceeded"
