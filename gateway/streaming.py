"""SSE answers: a request's events rendered by its protocol's builder, released however they end."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import StreamingResponse

from gateway.protocols.base import ResponseBuilder, StreamState
from gateway.request_events import ChoiceEnd, Failed, Restarted
from gateway.request_lifecycle import RequestLifecycle

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


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


class SseAnswer:
    """One streamed answer: the lifecycle's events in the builder's SSE events, then its
    release, once, as the response closes (whether or not the body ran to its end)."""

    def __init__(self, builder: ResponseBuilder, lifecycle: RequestLifecycle, state: StreamState):
        self.builder = builder
        self.lifecycle = lifecycle
        self.state = state
        self.status = 499  # until the events end: the client went away mid-stream

    def response(self) -> ClosingStreamingResponse:
        headers = {**SSE_HEADERS, **self.builder.response_headers(self.state.request)}
        return ClosingStreamingResponse(
            self.body(), on_close=self.close, media_type="text/event-stream", headers=headers
        )

    async def body(self) -> AsyncIterator[str]:
        builder, state = self.builder, self.state
        yield "".join(builder.stream_start(state))
        async with contextlib.aclosing(self.lifecycle.events()) as events:
            async for event in events:
                if isinstance(event, Failed):
                    self.status = event.stream_status
                    yield "".join(builder.stream_error(state, event.error))
                    return
                if isinstance(event, ChoiceEnd):
                    yield "".join(builder.stream_choice_end(state, event.as_choice()))
                    continue
                if isinstance(event, Restarted):  # events() never restarts a stream it began
                    raise RuntimeError("a stream cannot start over once it has begun")
                pieces = []
                if event.reasoning:
                    pieces += builder.stream_reasoning(state, event.index, event.reasoning)
                pieces += builder.stream_tokens(state, event.index, event.text, event.logprobs)
                if event.tool_calls:
                    pieces += builder.stream_tool_calls(state, event.index, event.tool_calls)
                if pieces:
                    yield "".join(pieces)
        yield "".join(builder.stream_end(state))
        self.status = 200

    def close(self) -> None:
        self.lifecycle.release(self.status, self.state.completion_tokens)
