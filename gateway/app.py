"""The Starlette application: routes, auth, and the worker hub's lifetime."""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.admission import AdmissionControl
from gateway.auth import check_api_key
from gateway.config import GatewayConfig
from gateway.console import console_routes
from gateway.errors import ErrorKind, GatewayError
from gateway.handler import ProtocolHandler
from gateway.kv_subscriber import KvSubscriber
from gateway.model_control_client import ModelControlClient
from gateway.model_loading import load_model, model_entries, unload_model
from gateway.model_manager import ModelManager
from gateway.model_metrics import ModelCollector
from gateway.prometheus import CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE
from gateway.prometheus import render_prometheus
from gateway.protocols.anthropic import AnthropicResponseBuilder
from gateway.protocols.base import ResponseBuilder
from gateway.protocols.completions import CompletionsResponseBuilder
from gateway.protocols.embeddings import EmbeddingsResponseBuilder
from gateway.protocols.openai import OpenAIResponseBuilder
from gateway.protocols.rerank import RerankResponseBuilder
from gateway.protocols.responses import IGNORED_TOOLS_HEADER, ResponsesResponseBuilder
from gateway.registry import WorkerRegistry
from gateway.request_ids import RequestIdMiddleware, http_error
from gateway.response_store import ResponseStore
from gateway.responses_routes import delete_response, get_response, list_input_items
from gateway.router import ExactPrefix, make_policy
from gateway.services import RequestServices
from gateway.stats import GatewayMetrics, aggregate_stats
from gateway.tokenize import count_tokens, detokenize, tokenize
from gateway.workers import WorkerHub

log = logging.getLogger(__name__)
# A route that answers with a protocol's handler (its worker access and error shape).
Route_ = Callable[[ProtocolHandler, Request], Awaitable[Response]]
# Response headers a browser client may read: its request id, when to retry a 429, and the
# Responses API's hosted tools left out.
CORS_EXPOSED_HEADERS = ["X-Request-Id", "request-id", "Retry-After", IGNORED_TOOLS_HEADER]


class Gateway:
    """Everything the routes share: registry, hub, policy, metrics and one handler per protocol."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.registry = WorkerRegistry()
        self.hub = WorkerHub(
            config.worker_bind,
            self.registry,
            config.heartbeat_timeout_s,
            config.max_frame_bytes,
            config.curve_secret_key,
            config.curve_authorized_keys,
        )
        self.policy = make_policy(config.routing)
        self.hub.on_worker_gone.append(self.policy.forget)
        self.kv_events: KvSubscriber | None = None  # the workers' KV events, for `exact`
        if isinstance(self.policy, ExactPrefix):
            self.kv_events = KvSubscriber(self.registry, self.policy.index, self.hub.drops)
            self.hub.on_worker_gone.append(self.kv_events.forget)
        self.metrics = GatewayMetrics()
        self.admission = AdmissionControl(
            config.max_in_flight, config.max_queued, config.queue_timeout_s
        )
        self.model_manager: ModelManager | None = None  # `astrai serve`'s on-demand models
        if config.model_control is not None:
            control = ModelControlClient(config.model_control)
            self.model_manager = ModelManager(control, self.registry)
        self.services = RequestServices(
            self.hub,
            self.registry,
            self.policy,
            self.metrics,
            config,
            self.admission,
            self.model_manager,
        )
        self.draining = False
        self.started_at = time.time()
        self.openai = self._handler(OpenAIResponseBuilder())
        self.anthropic = self._handler(AnthropicResponseBuilder())
        self.completions = self._handler(CompletionsResponseBuilder())
        store = ResponseStore(
            config.responses_store_entries, config.responses_store_mb * 1024 * 1024
        )
        self.responses = self._handler(ResponsesResponseBuilder(store))
        self.embeddings = self._handler(EmbeddingsResponseBuilder())
        self.rerank = self._handler(RerankResponseBuilder())

    def _handler(self, builder: ResponseBuilder) -> ProtocolHandler:
        return ProtocolHandler(builder, self.services, lambda: self.draining)

    def begin_drain(self) -> None:
        """Readiness fails and new requests get 503 from now on; running ones go on."""
        self.draining = True

    @property
    def busy(self) -> bool:
        return self.admission.in_flight > 0 or self.hub.num_open > 0

    # -- routes -------------------------------------------------------------------------------
    def _protected(
        self, handler: ProtocolHandler, route: Route_ | None = None
    ) -> Callable[[Request], Awaitable[Response]]:
        """`route` (default: the handler's chat route) behind the API key, every failure
        answered in the handler's protocol's shape."""

        async def endpoint(request: Request) -> Response:
            try:
                check_api_key(request, self.config.api_key)
                if route is not None:
                    return await route(handler, request)
                return await handler.handle(request)
            except GatewayError as error:
                return handler.refuse(error)
            except Exception:  # never a bare 500: render it in the protocol's shape, counted
                log.exception("unhandled error in %s", request.url.path)
                return handler.refuse(
                    GatewayError(ErrorKind.INTERNAL, "internal error; see the gateway log")
                )

        return endpoint

    async def models(self, request: Request) -> Response:
        try:
            check_api_key(request, self.config.api_key)
        except GatewayError as error:
            return self.openai.error_response(error)
        created, manager = int(self.started_at), self.model_manager
        if manager is None:
            data = model_entries(self.registry.served_names(), created)
        else:
            data = model_entries(manager.served_names(), created, manager.describe())
        return JSONResponse({"object": "list", "data": data})

    async def health(self, request: Request) -> Response:
        if self.draining:
            return JSONResponse({"detail": "the gateway is shutting down"}, status_code=503)
        workers = len(self.registry.live())
        expected = self.model_manager is None or self.model_manager.expects_workers()
        if workers == 0 and expected:
            return JSONResponse({"detail": "no worker is ready"}, status_code=503)
        return JSONResponse({"status": "ok", "model_loaded": True, "workers": workers})

    async def stats(self, request: Request) -> Response:
        stats = aggregate_stats(self.registry)
        stats["dropped_frames"] = dict(self.hub.drops.counts)
        stats["open_requests"] = self.hub.num_open
        stats["gateway"] = {  # which gateway answers: each lists the workers it sees
            "incarnation": self.hub.incarnation,
            "host": socket.gethostname(),
            "worker_bind": self.config.worker_bind,
            "in_flight": self.admission.in_flight,
            "queued": self.admission.queued,
            "rejected_overload": self.admission.rejected,
            "draining": self.draining,
            "routing": self.policy.name,
        }
        if self.kv_events is not None:
            stats["gateway"]["kv_events"] = self.kv_events.describe()
        if self.model_manager is not None:
            stats["models"] = self.model_manager.describe()
            stats["gateway"]["memory_budget_mb"] = self.model_manager.catalog.budget_mb
        return JSONResponse(stats)

    async def prometheus(self, request: Request) -> Response:
        models = None if self.model_manager is None else ModelCollector(self.model_manager)
        text = render_prometheus(self.registry, self.metrics, self.hub.drops.counts, models)
        return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            await self.hub.start()
            if self.kv_events is not None:
                await self.kv_events.start()
            if self.model_manager is not None:
                await self.model_manager.start()
            log.info("waiting for workers on %s", self.config.worker_bind)
            try:
                yield
            finally:
                if self.model_manager is not None:
                    await self.model_manager.stop()
                if self.kv_events is not None:
                    await self.kv_events.stop()
                await self.hub.stop()

        routes: list[BaseRoute] = [
            Route("/v1/chat/completions", self._protected(self.openai), methods=["POST"]),
            Route("/v1/completions", self._protected(self.completions), methods=["POST"]),
            Route("/v1/messages", self._protected(self.anthropic), methods=["POST"]),
            Route("/v1/responses", self._protected(self.responses), methods=["POST"]),
            Route("/v1/embeddings", self._protected(self.embeddings), methods=["POST"]),
            Route("/v1/rerank", self._protected(self.rerank), methods=["POST"]),
            Route("/rerank", self._protected(self.rerank), methods=["POST"]),
            Route(
                "/v1/responses/{response_id}",
                self._protected(self.responses, get_response),
                methods=["GET"],
            ),
            Route(
                "/v1/responses/{response_id}",
                self._protected(self.responses, delete_response),
                methods=["DELETE"],
            ),
            Route(
                "/v1/responses/{response_id}/input_items",
                self._protected(self.responses, list_input_items),
                methods=["GET"],
            ),
            Route(
                "/v1/messages/count_tokens",
                self._protected(self.anthropic, count_tokens),
                methods=["POST"],
            ),
            Route("/tokenize", self._protected(self.openai, tokenize), methods=["POST"]),
            Route("/detokenize", self._protected(self.openai, detokenize), methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/models/load", self._protected(self.openai, _load), methods=["POST"]),
            Route("/models/unload", self._protected(self.openai, _unload), methods=["POST"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/stats", self.stats, methods=["GET"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
        ]
        if self.config.console:
            routes += console_routes()
        return Starlette(
            routes=routes,
            lifespan=lifespan,
            middleware=self._middleware(),
            exception_handlers={404: http_error, 405: http_error},
        )

    def _middleware(self) -> list[Middleware]:
        """Request ids always; CORS only for the configured origins. CORS is outermost, so
        it answers a preflight itself: no API key check, no 405 for OPTIONS."""
        middleware = [Middleware(RequestIdMiddleware)]
        origins = list(self.config.cors_origins)
        if origins:
            cors = Middleware(
                CORSMiddleware,
                allow_origins=origins,
                allow_methods=["GET", "POST", "DELETE"],
                # Any header the client asks for: beyond the API's own (Authorization,
                # x-api-key, anthropic-version, X-Request-Id) the official SDKs send theirs
                # (x-stainless-*, anthropic-beta), and only the origin guards access.
                allow_headers=["*"],
                expose_headers=CORS_EXPOSED_HEADERS,
            )
            middleware.insert(0, cors)
        return middleware


async def _load(handler: ProtocolHandler, request: Request) -> Response:
    return await load_model(request, handler.services)


async def _unload(handler: ProtocolHandler, request: Request) -> Response:
    return await unload_model(request, handler.services)


def create_app(config: GatewayConfig) -> Starlette:
    return Gateway(config).app()
