"""Token counts and ids without generating: Anthropic's count_tokens, vLLM's /tokenize and
/detokenize. The worker's tokenizer answers, so tools and chat templates count as they will."""

from __future__ import annotations

import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from common.sampling_params import SamplingParams
from common.schemas import Rejected, Tokenize, Tokenized
from gateway.errors import ErrorKind, GatewayError
from gateway.handler import ProtocolHandler
from gateway.messages import rejection_error
from gateway.protocols.tokenize_body import DetokenizeBody, TokenizeBody
from gateway.workers import WorkerLost


async def count_tokens(handler: ProtocolHandler, request: Request) -> Response:
    """POST /v1/messages/count_tokens: {"input_tokens": n} for a Messages request body."""
    handler.check_open()
    body = await handler.read_body(request)
    if isinstance(body, dict):  # count_tokens takes no max_tokens; the model needs one
        body = {"max_tokens": 1, **body}
    chat = handler.builder.parse(body)
    message = Tokenize(_request_id(), chat.params, messages=chat.messages)
    reply = await ask_worker(handler, chat.model, message)
    return JSONResponse({"input_tokens": len(reply.token_ids)})


async def tokenize(handler: ProtocolHandler, request: Request) -> Response:
    """POST /tokenize: {"prompt": str} or a chat body with "messages" (and tools) →
    {"count", "max_model_len", "tokens"}."""
    handler.check_open()
    body = await handler.read_body(request)
    if isinstance(body, dict) and "messages" in body:
        chat = handler.builder.parse(body)
        model = chat.model
        message = Tokenize(_request_id(), chat.params, messages=chat.messages)
    else:
        raw = TokenizeBody.parse(body)
        model = raw.model
        message = Tokenize(_request_id(), SamplingParams(), prompt=raw.prompt)
    reply = await ask_worker(handler, model, message)
    tokens = reply.token_ids
    return JSONResponse(
        {"count": len(tokens), "max_model_len": reply.max_context, "tokens": tokens}
    )


async def detokenize(handler: ProtocolHandler, request: Request) -> Response:
    """POST /detokenize: {"tokens": [ids]} → {"prompt": text}."""
    handler.check_open()
    body = DetokenizeBody.parse(await handler.read_body(request))
    message = Tokenize(_request_id(), SamplingParams(), token_ids=body.tokens)
    reply = await ask_worker(handler, body.model, message)
    return JSONResponse({"prompt": reply.text})


async def ask_worker(
    handler: ProtocolHandler, requested_model: str | None, message: Tokenize
) -> Tokenized:
    """One Tokenize round trip to a live worker of the model asked for, holding an admission
    slot like any request: a worker's I/O thread tokenizes it, so a flood of long prompts to
    count queues behind the same limit as generation does."""
    started_at = time.monotonic()
    handler.check_open()  # refused while the gateway drains, as a generation is
    async with handler.services.admission.slot():
        model = await handler.await_model(requested_model, started_at)
        return await _round_trip(handler, model, message)


async def _round_trip(handler: ProtocolHandler, model: str, message: Tokenize) -> Tokenized:
    services = handler.services
    workers = services.registry.live(model)
    if not workers:
        raise GatewayError(ErrorKind.UNAVAILABLE, "no worker is ready; try again shortly")
    worker = services.policy.pick(workers, "")
    channel = services.hub.open(message.request_id, worker)
    try:
        if not await services.hub.send(worker, message):
            raise GatewayError(ErrorKind.UNAVAILABLE, "the worker could not be reached")
        while True:
            try:
                reply = await channel.get(services.config.accept_timeout_s)
            except TimeoutError:
                raise GatewayError(ErrorKind.UNAVAILABLE, "the worker did not answer") from None
            if isinstance(reply, Tokenized):
                return reply
            if isinstance(reply, Rejected):
                raise rejection_error(reply)
            if isinstance(reply, WorkerLost):
                raise GatewayError(ErrorKind.UNAVAILABLE, reply.detail)
    finally:
        services.hub.close(channel)


def _request_id() -> str:
    return f"tok-{uuid.uuid4().hex}"
