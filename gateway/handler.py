"""ProtocolHandler: one HTTP request → a worker → a JSON body or an SSE stream, any protocol."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from common.schemas import Abort, Accepted, Finished, Message, Rejected, Submit, Tokens
from gateway.admission import AdmissionControl
from gateway.config import GatewayConfig
from gateway.errors import ErrorKind, GatewayError
from gateway.protocols.base import (
    ChatRequest,
    ChatResult,
    ChoiceResult,
    ResponseBuilder,
    StreamState,
    TokenLogprob,
)
from gateway.registry import WorkerRegistry, WorkerState
from gateway.router import RoutingPolicy
from gateway.stats import GatewayMetrics
from gateway.workers import RequestChannel, WorkerHub, WorkerLost

log = logging.getLogger(__name__)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass
class Started:
    """A request some worker accepted."""

    channel: RequestChannel
    worker: WorkerState
    accepted: Accepted


def _logprobs(message: Tokens) -> list[TokenLogprob]:
    if not message.logprobs:
        return []
    return [
        TokenLogprob(token=entry[1], logprob=entry[2], top=tuple((t[1], t[2]) for t in entry[3]))
        for entry in message.logprobs
    ]


def _rejection(message: Rejected) -> GatewayError:
    if message.code in ("invalid_request", "context_length_exceeded"):
        code = message.code if message.code == "context_length_exceeded" else None
        return GatewayError.invalid(message.message, message.param, code)
    if message.code == "overloaded":
        return GatewayError(ErrorKind.UNAVAILABLE, message.message)
    return GatewayError(ErrorKind.INTERNAL, message.message)


def _finish_error(message: Finished) -> GatewayError | None:
    if message.finish_reason == "error":
        return GatewayError(ErrorKind.INTERNAL, f"generation failed: {message.error}")
    if message.finish_reason == "abort":
        return GatewayError(ErrorKind.UNAVAILABLE, "the request was aborted by its worker")
    return None


async def read_json(request: Request, max_bytes: int) -> Any:
    """The request body as JSON, refusing oversized, non-UTF-8 and malformed bodies."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise GatewayError(ErrorKind.PAYLOAD_TOO_LARGE, f"request body exceeds {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise GatewayError(
                ErrorKind.PAYLOAD_TOO_LARGE, f"request body exceeds {max_bytes} bytes"
            )
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GatewayError.invalid("request body is not valid UTF-8") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # also absurd numbers and deep nesting
        raise GatewayError.invalid(f"request body is not valid JSON: {exc}") from None


class ProtocolHandler:
    """Drives any ResponseBuilder through the same lifecycle; protocols differ only there."""

    def __init__(
        self,
        builder: ResponseBuilder,
        hub: WorkerHub,
        registry: WorkerRegistry,
        policy: RoutingPolicy,
        metrics: GatewayMetrics,
        config: GatewayConfig,
        admission: AdmissionControl,
        draining: Callable[[], bool],
    ) -> None:
        self.builder = builder
        self.hub = hub
        self.registry = registry
        self.policy = policy
        self.metrics = metrics
        self.config = config
        self.admission = admission
        self.draining = draining

    def error_response(self, error: GatewayError) -> JSONResponse:
        status, body = self.builder.error_body(error)
        headers = {}
        if error.retry_after_s is not None:
            headers["Retry-After"] = str(max(1, round(error.retry_after_s)))
        return JSONResponse(body, status_code=status, headers=headers)

    async def handle(self, request: Request) -> Response:
        """Admission first (before any work), then parse, route, submit, answer."""
        started_at = time.monotonic()
        if self.draining():
            return self._refuse(GatewayError(ErrorKind.UNAVAILABLE, "the gateway is shutting down"))
        try:
            await self.admission.acquire()
        except GatewayError as error:
            return self._refuse(error)
        handed_to_stream = False
        try:
            try:
                chat = self.builder.parse(await read_json(request, self.config.max_body_bytes))
                model = self.resolve_model(chat.model)
                request_id = f"{self.builder.id_prefix}{uuid.uuid4().hex}"
                started = await self.start(request_id, model, chat)
            except GatewayError as error:
                return self._refuse(error)
            except ClientDisconnect:
                return Response(status_code=499)
            state = StreamState(
                request_id=request_id,
                model=model,
                created=int(time.time()),
                request=chat,
                prompt_tokens=started.accepted.prompt_tokens,
            )
            if chat.stream:
                stream = ActiveStream(self, state, started, started_at)
                handed_to_stream = True
                return ClosingStreamingResponse(
                    stream.events(),
                    on_close=stream.close,
                    media_type="text/event-stream",
                    headers=SSE_HEADERS,
                )
            return await self.respond(request, state, started, started_at)
        finally:
            if not handed_to_stream:
                self.admission.release()

    def _refuse(self, error: GatewayError) -> JSONResponse:
        response = self.error_response(error)
        self.metrics.observe(self.builder.name, response.status_code, 0.0, None, 0)
        return response

    # -- choosing and starting ----------------------------------------------------------------
    def resolve_model(self, requested: str | None) -> str:
        models = self.registry.models()
        if not models:
            raise GatewayError(ErrorKind.UNAVAILABLE, "no worker is ready; try again shortly")
        if requested is None:
            if len(models) == 1:
                return models[0]
            raise GatewayError.invalid(
                f"model is required when several are served: {', '.join(models)}", "model"
            )
        if requested not in models:
            raise GatewayError(
                ErrorKind.NOT_FOUND,
                f"model {requested!r} is not served here; available: {', '.join(models)}",
                param="model",
                code="model_not_found",
            )
        return requested

    async def start(self, request_id: str, model: str, chat: ChatRequest) -> Started:
        """Submit to a worker and wait for it to accept or reject, before any HTTP status.

        A worker lost before it accepted is replaced by another one (retried once).
        """
        submit = Submit(request_id=request_id, params=chat.params, messages=chat.messages)
        prompt_text = "\n".join(m["content"] for m in chat.messages)
        tried: set[str] = set()
        for attempt in range(self.config.submit_attempts):
            candidates = [w for w in self.registry.live(model) if w.worker_id not in tried]
            if not candidates:
                break
            worker = self.policy.pick(candidates, prompt_text)
            tried.add(worker.worker_id)
            if attempt:
                self.metrics.retries += 1
            channel = self.hub.open(request_id, worker)
            reply = await self._first_reply(worker, channel, submit)
            if isinstance(reply, Accepted):
                return Started(channel, worker, reply)
            self.hub.close(channel)
            if isinstance(reply, Rejected) and reply.code != "draining":
                raise _rejection(reply)
        raise GatewayError(ErrorKind.UNAVAILABLE, f"no worker of model {model!r} could take it")

    async def _first_reply(
        self, worker: WorkerState, channel: RequestChannel, submit: Submit
    ) -> Message | WorkerLost:
        if not await self.hub.send(worker, submit):
            return WorkerLost(worker.worker_id, "unreachable")
        try:
            while True:
                reply = await channel.get(self.config.accept_timeout_s)
                if isinstance(reply, (Accepted, Rejected, WorkerLost)):
                    return reply
        except TimeoutError:
            await self.hub.send(worker, Abort(submit.request_id))
            return WorkerLost(worker.worker_id, "no answer to submit")

    def _abort_soon(self, started: Started) -> None:
        """Tell the worker to stop, without awaiting (we may be inside a cancellation)."""
        task = asyncio.ensure_future(
            self.hub.send(started.worker, Abort(started.channel.request_id))
        )
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    # -- non-streamed ----------------------------------------------------------------------------
    async def respond(
        self, request: Request, state: StreamState, started: Started, started_at: float
    ) -> Response:
        collect = asyncio.ensure_future(self._collect(state, started))
        disconnect = asyncio.ensure_future(_wait_disconnect(request))
        try:
            done, _ = await asyncio.wait({collect, disconnect}, return_when=asyncio.FIRST_COMPLETED)
            if collect not in done:  # the client left: free the worker's pages now
                collect.cancel()
                self._abort_soon(started)
                return Response(status_code=499)
            result, ttft = collect.result()
        except GatewayError as error:
            self._abort_soon(started)
            response = self.error_response(error)
            self.metrics.observe(self.builder.name, response.status_code, 0.0, None, 0)
            return response
        finally:
            disconnect.cancel()
            self.hub.close(started.channel)
        latency = time.monotonic() - started_at
        self.metrics.observe(self.builder.name, 200, latency, ttft, result.completion_tokens)
        return JSONResponse(self.builder.format_response(result))

    async def _collect(
        self, state: StreamState, started: Started
    ) -> tuple[ChatResult, float | None]:
        n = state.request.n
        choices = [ChoiceResult(index=i) for i in range(n)]
        result = ChatResult(
            request_id=state.request_id,
            model=state.model,
            created=state.created,
            choices=choices,
            prompt_tokens=state.prompt_tokens,
        )
        begun = time.monotonic()
        ttft: float | None = None
        remaining = n
        while remaining:
            message = await started.channel.get()
            if isinstance(message, WorkerLost):
                raise GatewayError(ErrorKind.UNAVAILABLE, f"worker lost: {message.reason}")
            if isinstance(message, Tokens) and 0 <= message.index < n:
                ttft = ttft if ttft is not None else time.monotonic() - begun
                choice = choices[message.index]
                choice.text += message.text
                choice.logprobs.extend(_logprobs(message))
            elif isinstance(message, Finished) and 0 <= message.index < n:
                error = _finish_error(message)
                if error is not None:
                    raise error
                choice = choices[message.index]
                choice.finish_reason = message.finish_reason
                choice.stop = message.stop
                choice.completion_tokens = message.completion_tokens
                result.cached_tokens = message.cached_tokens
                remaining -= 1
        return result, ttft


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
        self, handler: ProtocolHandler, state: StreamState, started: Started, started_at: float
    ) -> None:
        self.handler = handler
        self.state = state
        self.started = started
        self.started_at = started_at
        self.ttft: float | None = None
        self.ended = False
        self.status = 200
        self._closed = False

    async def events(self) -> AsyncIterator[str]:
        builder, state = self.handler.builder, self.state
        n = state.request.n
        yield "".join(builder.stream_start(state))
        remaining = n
        while remaining:
            message = await self.started.channel.get()
            if isinstance(message, WorkerLost):
                error = GatewayError(ErrorKind.UNAVAILABLE, f"worker lost: {message.reason}")
                yield self._fail(error, 503)
                return
            if isinstance(message, Tokens) and 0 <= message.index < n:
                if self.ttft is None:
                    self.ttft = time.monotonic() - self.started_at
                state.completion_tokens += len(message.token_ids)
                pieces = builder.stream_tokens(
                    state, message.index, message.text, _logprobs(message)
                )
                if pieces:
                    yield "".join(pieces)
            elif isinstance(message, Finished) and 0 <= message.index < n:
                error = _finish_error(message)
                if error is not None:
                    yield self._fail(error, 500)
                    return
                state.cached_tokens = message.cached_tokens
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
        return "".join(self.handler.builder.stream_error(self.state, error))

    def close(self) -> None:
        """Runs once when the response ends: abort an unfinished request, free its slot."""
        if self._closed:
            return
        self._closed = True
        handler = self.handler
        if not self.ended:  # the client went away mid-stream
            self.status = 499
            handler._abort_soon(self.started)
        handler.hub.close(self.started.channel)
        handler.admission.release()
        latency = time.monotonic() - self.started_at
        handler.metrics.observe(
            handler.builder.name, self.status, latency, self.ttft, self.state.completion_tokens
        )


async def _wait_disconnect(request: Request) -> None:
    """Returns when the client closes its connection (the body has been read already)."""
    with contextlib.suppress(Exception):
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return
    await asyncio.Event().wait()  # receive() failed: never report a disconnect we did not see
