"""SSE responses: one streamed request from the worker's messages to the client, cleaned up."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import StreamingResponse

from common.schemas import Finished, Tokens
from gateway.admission import AdmissionControl
from gateway.errors import ErrorKind, GatewayError
from gateway.messages import Started, finish_error, logprobs_of, tool_call_parts
from gateway.protocols.base import ChoiceResult, ResponseBuilder, StreamState
from gateway.stats import GatewayMetrics
from gateway.workers import WorkerHub, WorkerLost


class ClosingStreamingResponse(StreamingResponse):
    """A StreamingResponse that always runs `on_close` when it ends, however it ends.

    The body generator's own `finally` does not run if it never started (a client gone
    before the first byte); this does, so worker pages and admission slots never leak.
    """

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None], **kwargs: Any):
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


class ActiveStream:
    """One SSE response in progress: turns worker messages into the builder's events."""

    def __init__(
        self,
        builder: ResponseBuilder,
        hub: WorkerHub,
        admission: AdmissionControl,
        metrics: GatewayMetrics,
        state: StreamState,
        started: Started,
        started_at: float,
        abort: Callable[[Started], None],
    ) -> None:
        self.builder = builder
        self.hub = hub
        self.admission = admission
        self.metrics = metrics
        self.abort = abort
        self.state = state
        self.started = started
        self.started_at = started_at
        self.ttft: float | None = None
        self.ended = False
        self.status = 200
        self._closed = False

    async def events(self) -> AsyncIterator[str]:
        builder, state = self.builder, self.state
        n = state.request.num_choices
        yield "".join(builder.stream_start(state))
        remaining = n
        while remaining:
            message = await self.started.channel.get()
            if isinstance(message, WorkerLost):
                error = GatewayError(ErrorKind.UNAVAILABLE, message.detail)
                yield self._fail(error, 503)
                return
            if isinstance(message, Tokens) and 0 <= message.index < n:
                if self.ttft is None and message.token_ids:  # an echoed prompt is no token
                    self.ttft = time.monotonic() - self.started_at
                state.completion_tokens += len(message.token_ids)
                pieces = builder.stream_tokens(
                    state, message.index, message.text, logprobs_of(message)
                )
                parts = tool_call_parts(message)
                if parts:
                    pieces += builder.stream_tool_calls(state, message.index, parts)
                if pieces:
                    yield "".join(pieces)
            elif isinstance(message, Finished) and 0 <= message.index < n:
                failure = finish_error(message)
                if failure is not None:
                    yield self._fail(failure, 500)
                    return
                if message.index % state.request.n == 0:  # once per prompt: its first choice
                    state.cached_tokens += message.cached_tokens
                choice = ChoiceResult(
                    index=message.index,
                    finish_reason=message.finish_reason,
                    stop=message.stop,
                    completion_tokens=message.completion_tokens,
                )
                yield "".join(builder.stream_choice_end(state, choice))
                remaining -= 1
        yield "".join(builder.stream_end(state))
        self.ended = True

    def _fail(self, error: GatewayError, status: int) -> str:
        self.ended = True
        self.status = status
        return "".join(self.builder.stream_error(self.state, error))

    def close(self) -> None:
        """Runs once when the response ends: abort an unfinished request, free its slot."""
        if self._closed:
            return
        self._closed = True
        if not self.ended:  # the client went away mid-stream
            self.status = 499
            self.abort(self.started)
        self.hub.close(self.started.channel)
        self.admission.release()
        latency = time.monotonic() - self.started_at
        self.metrics.observe(
            self.builder.name, self.status, latency, self.ttft, self.state.completion_tokens
        )
