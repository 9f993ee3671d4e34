"""ProtocolHandler: one HTTP request → a worker → a JSON body or an SSE stream, any protocol."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from gateway.body import read_json, wait_disconnect
from gateway.errors import ErrorKind, GatewayError
from gateway.model_loading import await_loaded
from gateway.protocols.base import ChatRequest, ResponseBuilder, StreamState
from gateway.request_lifecycle import RequestLifecycle, wait_for_workers
from gateway.response_fold import fold_events
from gateway.served_models import resolve_served
from gateway.services import RequestServices
from gateway.streaming import SseAnswer

log = logging.getLogger(__name__)

DRAIN_RETRY_AFTER_S = 5.0


class ProtocolHandler:
    """Drives any ResponseBuilder through the same lifecycle; protocols differ only there."""

    def __init__(
        self,
        builder: ResponseBuilder,
        services: RequestServices,
        draining: Callable[[], bool],
    ) -> None:
        self.builder = builder
        self.services = services
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
        From admission on, a RequestLifecycle holds what the request takes; a stream takes
        it over, and every other path out of here releases it.
        """
        started_at = time.monotonic()
        try:
            self.check_open()
        except GatewayError as error:
            return self.refuse(error)
        try:
            chat = self.builder.parse(await self.read_body(request))
        except GatewayError as error:
            return self.refuse(error)
        except ClientDisconnect:
            return self.client_gone()
        chat = self.with_budget_policy(chat)
        lifecycle = RequestLifecycle(self.services, self.builder, started_at)
        try:
            await lifecycle.admit()
        except GatewayError as error:
            return self.refuse(error)
        handed_to_stream = False
        try:
            try:
                model = await self.await_model(chat.model, started_at, request)
                state = await lifecycle.start(chat, model)
            except GatewayError as error:
                return self.fail(lifecycle, error)
            except ClientDisconnect:
                lifecycle.release(499, None)
                return Response(status_code=499)
            if chat.stream:
                handed_to_stream = True
                return SseAnswer(self.builder, lifecycle, state).response()
            return await self.respond(request, lifecycle, state)
        finally:
            if not handed_to_stream:
                lifecycle.discard()  # only an unexpected exception finds it unreleased

    def check_open(self) -> None:
        """Refuse new work while draining; a client that retries finds the replacement
        gateway, or another replica."""
        if self.draining():
            raise GatewayError(
                ErrorKind.UNAVAILABLE,
                "the gateway is shutting down",
                retry_after_s=DRAIN_RETRY_AFTER_S,
            )

    def with_budget_policy(self, chat: ChatRequest) -> ChatRequest:
        """`--default-max-tokens` for a request that set no budget (never below its
        min_tokens); under `--max-tokens-past-context clamp`, a budget the context cannot
        hold is cut to what it leaves."""
        config, params = self.services.config, chat.params
        update: dict[str, Any] = {}
        if config.default_max_tokens is not None and params.max_tokens is None:
            update["max_tokens"] = max(config.default_max_tokens, params.min_tokens)
        budget = update.get("max_tokens", params.max_tokens)
        if config.max_tokens_past_context == "clamp" and budget is not None:
            update["clamp_max_tokens"] = True
        if not update:
            return chat
        return replace(chat, params=params.model_copy(update=update))

    async def read_body(self, request: Request) -> Any:
        """The JSON body, within the configured size and time."""
        config = self.services.config
        return await read_json(request, config.max_body_bytes, config.body_timeout_s)

    def client_gone(self) -> Response:
        """The client left before its answer (nginx's 499), counted like any answer."""
        self.services.metrics.observe(self.builder.name, 499, 0.0, None, 0)
        return Response(status_code=499)

    def refuse(self, error: GatewayError) -> JSONResponse:
        """The error answered in the protocol's shape, and counted."""
        response = self.error_response(error)
        self.services.metrics.observe(self.builder.name, response.status_code, 0.0, None, 0)
        return response

    def fail(self, lifecycle: RequestLifecycle, error: GatewayError) -> JSONResponse:
        """An admitted request's error in the protocol's shape; the request is released."""
        response = self.error_response(error)
        lifecycle.release(response.status_code, None)
        return response

    async def await_model(
        self, requested: str | None, started_at: float, request: Request | None = None
    ) -> str:
        """resolve_model, once a worker is registered: while none is (the gateway started
        first, or its only worker restarts), the request waits for one until its queue
        timeout from arrival has passed, then is refused as unavailable. Under `astrai
        serve`, a model not running is loaded for it first (gateway/model_loading.py)."""
        if self.services.models is not None:
            return await await_loaded(self.services, requested, started_at, request)
        deadline = started_at + self.services.config.queue_timeout_s
        await wait_for_workers(self.services.registry.models, deadline)
        return self.resolve_model(requested)

    def resolve_model(self, requested: str | None) -> str:
        """The served model a request names, by its own name, an alias or a pattern."""
        registry = self.services.registry
        if not registry.models():
            raise GatewayError(ErrorKind.UNAVAILABLE, "no worker is ready; try again shortly")
        return resolve_served(registry.served_names(), requested)

    # -- non-streamed ----------------------------------------------------------------------------
    async def respond(
        self, request: Request, lifecycle: RequestLifecycle, state: StreamState
    ) -> Response:
        """The events folded into one JSON body, unless the client leaves first (499)."""
        fold = asyncio.ensure_future(fold_events(state, lifecycle.events()))
        disconnect = asyncio.ensure_future(wait_disconnect(request))
        try:
            done, _ = await asyncio.wait({fold, disconnect}, return_when=asyncio.FIRST_COMPLETED)
            if fold not in done:  # the client left: the release aborts it on the worker now
                fold.cancel()
                lifecycle.release(499, None)
                return Response(status_code=499)
            result = fold.result()
        except GatewayError as error:
            return self.fail(lifecycle, error)
        finally:
            disconnect.cancel()
        lifecycle.release(200, result.completion_tokens)
        headers = self.builder.response_headers(state.request)
        return JSONResponse(self.builder.format_response(result), headers=headers)
