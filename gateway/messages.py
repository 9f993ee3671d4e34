"""What a worker said about a request, in the gateway's terms: logprobs, tool calls, errors."""

from __future__ import annotations

from common.schemas import Finished, Rejected, Tokens
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.base import TokenLogprob, ToolCallPart


def logprobs_of(message: Tokens) -> list[TokenLogprob]:
    if not message.logprobs:
        return []
    return [
        TokenLogprob(token=entry[1], logprob=entry[2], top=tuple((t[1], t[2]) for t in entry[3]))
        for entry in message.logprobs
    ]


def tool_call_parts(message: Tokens) -> list[ToolCallPart]:
    return [ToolCallPart(*entry) for entry in message.tool_calls or ()]


def rejection_error(message: Rejected) -> GatewayError:
    if message.code in ("invalid_request", "context_length_exceeded"):
        code = message.code if message.code == "context_length_exceeded" else None
        return GatewayError.invalid(message.message, message.param, code)
    if message.code == "overloaded":
        return GatewayError(ErrorKind.UNAVAILABLE, message.message)
    return GatewayError(ErrorKind.INTERNAL, message.message)


def finish_error(message: Finished) -> GatewayError | None:
    if message.finish_reason == "error":
        return GatewayError(ErrorKind.INTERNAL, f"generation failed: {message.error}")
    if message.finish_reason == "abort":
        return GatewayError(ErrorKind.UNAVAILABLE, "the request was aborted by its worker")
    return None
