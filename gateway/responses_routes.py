"""GET and DELETE /v1/responses/{id}: a stored response, read or forgotten; and GET
/v1/responses/{id}/input_items: the input its request gave, a page at a time."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from common.validation import describe, integer, text
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


class InputItemsQuery(BaseModel):
    """The list's query, as OpenAI's: `after` an item id, `limit` 1-100 (20), `order` asc or
    desc (desc: the last item first). `include` and other keys change nothing."""

    after: Annotated[str, text()] | None = None
    limit: Annotated[int, integer(1, 100)] = 20
    order: Literal["asc", "desc"] = "desc"

    @classmethod
    def parse(cls, request: Request) -> InputItemsQuery:
        params: dict[str, Any] = {
            key: request.query_params[key]
            for key in ("after", "limit", "order")
            if key in request.query_params
        }
        if isinstance(params.get("limit"), str) and params["limit"].isdigit():
            params["limit"] = int(params["limit"])  # a query's numbers come as text
        try:
            return cls.model_validate(params)
        except ValidationError as exc:
            param, message = describe(exc)
            raise GatewayError.invalid(message, param) from None


async def list_input_items(handler: ProtocolHandler, request: Request) -> Response:
    """A page of a stored response's input items (the SDK's responses.input_items.list)."""
    query = InputItemsQuery.parse(request)
    items = _builder(handler).store.input_items(request.path_params["response_id"])
    ordered = items if query.order == "asc" else items[::-1]
    if query.after is not None:
        ids = [item["id"] for item in ordered]
        if query.after not in ids:
            raise GatewayError.invalid(f"after: no input item {query.after!r} here", "after")
        ordered = ordered[ids.index(query.after) + 1 :]
    page = ordered[: query.limit]
    return JSONResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(ordered) > len(page),
        }
    )
