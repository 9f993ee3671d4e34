"""ResponseStore: the Responses API's stored responses, in the gateway's memory and bounded.

What holds: at most `max_entries` responses and `max_bytes` of them (their JSON, response,
conversation and input items together); storing one more evicts the least recently used
(stored, read by GET, or continued with `previous_response_id`) until both bounds hold. A
response larger than `max_bytes` alone is not kept. Nothing survives a gateway restart, and
gateways that share workers do not share their stores.
"""

from __future__ import annotations

import copy
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from gateway.errors import ErrorKind, GatewayError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]  # the response object, as GET returns it
    conversation: list[dict[str, Any]]  # neutral turns: its input (no instructions) + output
    num_bytes: int
    input_items: list[dict[str, Any]]  # its request's own `input`, as items with ids


class ResponseStore:
    """Responses by id, least recently used first."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        if max_entries < 0 or max_bytes < 0:
            raise ValueError(f"store bounds must be >= 0, got {max_entries}, {max_bytes}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.num_bytes = 0
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def ids(self) -> list[str]:
        """The stored ids, least recently used first (the next to be evicted)."""
        return list(self._entries)

    def put(
        self,
        response: dict[str, Any],
        conversation: list[dict[str, Any]],
        input_items: list[dict[str, Any]] | None = None,
    ) -> None:
        items = input_items or []
        num_bytes = len(json.dumps(response)) + len(json.dumps(conversation))
        num_bytes += len(json.dumps(items)) if items else 0
        if num_bytes > self.max_bytes or self.max_entries == 0:
            log.warning("response %s not stored: %d bytes", response["id"], num_bytes)
            return
        self.delete(response["id"])
        self._entries[response["id"]] = StoredResponse(response, conversation, num_bytes, items)
        self.num_bytes += num_bytes
        while len(self._entries) > self.max_entries or self.num_bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self.num_bytes -= evicted.num_bytes

    def get(self, response_id: str) -> dict[str, Any]:
        """The stored response object; a 404 naming it if there is none."""
        return self._use(response_id, None).response

    def input_items(self, response_id: str) -> list[dict[str, Any]]:
        """The input items of a stored response's request; a 404 naming it if there is none."""
        return self._use(response_id, None).input_items

    def conversation(self, response_id: str) -> list[dict[str, Any]]:
        """The turns a response continues from (a copy); a 400 if it is not stored."""
        return copy.deepcopy(self._use(response_id, "previous_response_id").conversation)

    def delete(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is None:
            return False
        self.num_bytes -= entry.num_bytes
        return True

    def _use(self, response_id: str, param: str | None) -> StoredResponse:
        entry = self._entries.get(response_id)
        if entry is None:
            message = f"Response with id {response_id!r} not found."
            if param is None:
                raise GatewayError(ErrorKind.NOT_FOUND, message)
            raise GatewayError.invalid(
                f"Previous response with id {response_id!r} not found.",
                param,
                "previous_response_not_found",
            )
        self._entries.move_to_end(response_id)
        return entry
