"""GET and DELETE /v1/responses/{id}: a stored response, read or forgotten."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import ErrorKind, GatewayError
from gateway.handler import ProtocolHandler
from gateway.protocols.responses import ResponsesResponseBuilder


def _builder(handler: ProtocolHandler) -> ResponsesResponseBuilder:
    builder = handler.builder
    assert isinstance(builder, ResponsesResponseBuilder)
    return builder


async def get_response(handler: ProtocolHandler, request: Request) -> Response:
    """The response object as it was when it finished; 404 if it is not (or no longer) kept."""
    response = _builder(handler).store.get(request.path_params["response_id"])
    return JSONResponse(response)


async def delete_response(handler: ProtocolHandler, request: Request) -> Response:
    response_id = request.path_params["response_id"]
    if not _builder(handler).store.delete(response_id):
        raise GatewayError(ErrorKind.NOT_FOUND, f"Response with id {response_id!r} not found.")
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})
