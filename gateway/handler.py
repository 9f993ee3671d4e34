"""ProtocolHandler: one HTTP request → a worker → a JSON body or an SSE stream, any protocol."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from common.schemas import Abort, Accepted, Finished, Message, Rejected, Submit, Tokens
from gateway.admission import AdmissionControl
from gateway.body import read_json, wait_disconnect
from gateway.config import GatewayConfig
from gateway.errors import ErrorKind, GatewayError
from gateway.messages import (
    Started,
    finish_error,
    logprobs_of,
    rejection_error,
    tool_call_parts,
)
from gateway.protocols.base import (
    ChatRequest,
    ChatResult,
    ChoiceResult,
    ResponseBuilder,
    StreamState,
)
from gateway.registry import WorkerRegistry, WorkerState
from gateway.router import RoutingPolicy
from gateway.stats import GatewayMetrics
from gateway.streaming import ActiveStream, ClosingStreamingResponse
from gateway.workers import RequestChannel, WorkerHub, WorkerLost

log = logging.getLogger(__name__)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DRAIN_RETRY_AFTER_S = 5.0


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
        if error.close_connection:
            headers["Connection"] = "close"
        return JSONResponse(body, status_code=status, headers=headers)

    async def handle(self, request: Request) -> Response:
        """Read and parse the body, then admission, route, submit, answer.

        The body comes first, bounded in size and time: a slow or malformed request holds
        no admission slot (eight clients sending a byte every 2 s once held them all).
        """
        started_at = time.monotonic()
        if self.draining():
            # A client that retries finds the replacement gateway, or another replica.
            stopping = GatewayError(
                ErrorKind.UNAVAILABLE,
                "the gateway is shutting down",
                retry_after_s=DRAIN_RETRY_AFTER_S,
            )
            return self.refuse(stopping)
        try:
            chat = self.builder.parse(await self.read_body(request))
        except GatewayError as error:
            return self.refuse(error)
        except ClientDisconnect:
            return self.client_gone()
        try:
            await self.admission.acquire()
        except GatewayError as error:
            return self.refuse(error)
        handed_to_stream = False
        try:
            try:
                model = self.resolve_model(chat.model)
                request_id = f"{self.builder.id_prefix}{uuid.uuid4().hex}"
                started = await self.start(request_id, model, chat)
            except GatewayError as error:
                return self.refuse(error)
            except ClientDisconnect:
                return self.client_gone()
            state = StreamState(
                request_id=request_id,
                model=model,
                created=int(time.time()),
                request=chat,
                prompt_tokens=started.accepted.prompt_tokens,
            )
            if chat.stream:
                stream = ActiveStream(
                    self.builder,
                    self.hub,
                    self.admission,
                    self.metrics,
                    state,
                    started,
                    started_at,
                    self._abort_soon,
                )
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

    async def read_body(self, request: Request) -> Any:
        """The JSON body, within the configured size and time."""
        return await read_json(request, self.config.max_body_bytes, self.config.body_timeout_s)

    def client_gone(self) -> Response:
        """The client left before its answer (nginx's 499), counted like any answer."""
        self.metrics.observe(self.builder.name, 499, 0.0, None, 0)
        return Response(status_code=499)

    def refuse(self, error: GatewayError) -> JSONResponse:
        """The error answered in the protocol's shape, and counted."""
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
        submit = chat.submit(request_id)
        prompt_text = chat.routing_text
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
            try:
                reply = await self._first_reply(worker, channel, submit)
            except BaseException:
                # The client left while we waited, or the submit failed: nothing stays open
                # here, and nothing runs on for nobody there.
                self.hub.close(channel)
                self._send_abort_soon(worker, request_id)
                raise
            if isinstance(reply, Accepted):
                return Started(channel, worker, reply)
            self.hub.close(channel)
            if isinstance(reply, Rejected) and reply.code != "draining":
                raise rejection_error(reply)
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
        self._send_abort_soon(started.worker, started.channel.request_id)

    def _send_abort_soon(self, worker: WorkerState, request_id: str) -> None:
        """Tell the worker to stop, without awaiting (we may be inside a cancellation)."""
        task = asyncio.ensure_future(self.hub.send(worker, Abort(request_id)))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    # -- non-streamed ----------------------------------------------------------------------------
    async def respond(
        self, request: Request, state: StreamState, started: Started, started_at: float
    ) -> Response:
        collect = asyncio.ensure_future(self._collect(state, started, started_at))
        disconnect = asyncio.ensure_future(wait_disconnect(request))
        try:
            done, _ = await asyncio.wait({collect, disconnect}, return_when=asyncio.FIRST_COMPLETED)
            if collect not in done:  # the client left: free the worker's pages now
                collect.cancel()
                self._abort_soon(started)
                return self.client_gone()
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
        self, state: StreamState, started: Started, started_at: float
    ) -> tuple[ChatResult, float | None]:
        """The events folded into one result, and the time to first token measured from the
        request's arrival, as for a stream (one definition in the histogram)."""
        n = state.request.num_choices
        choices = [ChoiceResult(index=i) for i in range(n)]
        result = ChatResult(
            request_id=state.request_id,
            model=state.model,
            created=state.created,
            choices=choices,
            prompt_tokens=state.prompt_tokens,
        )
        ttft: float | None = None
        remaining = n
        while remaining:
            message = await started.channel.get()
            if isinstance(message, WorkerLost):
                raise GatewayError(ErrorKind.UNAVAILABLE, message.detail)
            if isinstance(message, Tokens) and 0 <= message.index < n:
                if ttft is None and message.token_ids:  # an echoed prompt is no first token
                    ttft = time.monotonic() - started_at
                choice = choices[message.index]
                choice.text += message.text
                choice.logprobs.extend(logprobs_of(message))
                choice.add_tool_call_parts(tool_call_parts(message))
            elif isinstance(message, Finished) and 0 <= message.index < n:
                error = finish_error(message)
                if error is not None:
                    raise error
                choice = choices[message.index]
                choice.finish_reason = message.finish_reason
                choice.stop = message.stop
                choice.completion_tokens = message.completion_tokens
                if message.index % state.request.n == 0:  # once per prompt: its first choice
                    result.cached_tokens += message.cached_tokens
                remaining -= 1
        return result, ttft
