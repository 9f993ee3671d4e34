"""Per-request errors: the request is refused with a code and the parameter at fault."""

from __future__ import annotations

from common.errors import RejectCode, RequestError

__all__ = ["ContextLengthExceeded", "RequestError"]


class ContextLengthExceeded(RequestError):
    """The prompt, or prompt + max_tokens, does not fit the model's context."""

    code = RejectCode.CONTEXT_LENGTH_EXCEEDED
