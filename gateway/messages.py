"""What a worker's refusals and failed endings are, in the gateway's terms: its errors."""

from __future__ import annotations

from common.errors import RejectCode
from common.schemas import Finished, Rejected
from common.token_output import FinishReason
from gateway.errors import ErrorKind, GatewayError


def rejection_error(message: Rejected) -> GatewayError:
    if message.code == RejectCode.CONTEXT_LENGTH_EXCEEDED:
        return GatewayError.invalid(message.message, message.param, str(message.code))
    if message.code == RejectCode.INVALID_REQUEST:
        return GatewayError.invalid(message.message, message.param)
    if message.code == RejectCode.OVERLOADED:
        return GatewayError(ErrorKind.UNAVAILABLE, message.message)
    return GatewayError(ErrorKind.INTERNAL, message.message)


def finish_error(message: Finished) -> GatewayError | None:
    if message.finish_reason == FinishReason.ERROR:
        return GatewayError(ErrorKind.INTERNAL, f"generation failed: {message.error}")
    if message.finish_reason == FinishReason.ABORT:
        return GatewayError(ErrorKind.UNAVAILABLE, "the request was aborted by its worker")
    return None
