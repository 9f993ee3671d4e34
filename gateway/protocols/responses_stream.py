"""One answer as the Responses API's numbered events; the response object is their fold.

Events, in OpenAI's order: `response.created`, `response.in_progress`; per output item
`response.output_item.added`, then for a reasoning item (a reasoning model's thoughts, first)
`response.content_part.added`, `response.reasoning_text.delta`*, `response.reasoning_text.done`,
`response.content_part.done`; for a message `response.content_part.added`,
`response.output_text.delta`*, `response.output_text.done`, `response.content_part.done`, or
for a function call `response.function_call_arguments.delta`*,
`response.function_call_arguments.done`; then `response.output_item.done`; at the end
`response.completed` (or `response.incomplete` when the token budget ran out, or
`response.failed`). Every event carries the next `sequence_number`, from 0. The same object
folds a non-streamed answer, so both kinds of answer are the same response.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.token_output import FinishReason, TokenLogprob, ToolCallDelta
from gateway.errors import GatewayError
from gateway.protocols.base import ChatRequest
from gateway.protocols.responses_items import (
    copy_item,
    copy_part,
    logprob,
    message_item,
    reasoning_item,
    reasoning_part,
    text_part,
    without_bytes,
)

Event = dict[str, Any]


@dataclass(frozen=True)
class ResponsesRequest(ChatRequest):
    """A chat request plus what only the Responses API needs: the settings its response
    object echoes, the conversation before this answer (stored with it for a later
    `previous_response_id`; instructions excluded, as OpenAI does), and its hosted tools
    left out."""

    settings: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    store: bool = True
    logprobs: bool = False  # include: message.output_text.logprobs
    ignored_tools: tuple[str, ...] = ()
    input_items: list[Any] = field(default_factory=list)  # its `input`, as read (InputItem)


class ResponseStream:
    """The events of one response, numbered, and the response object they add up to."""

    def __init__(self, request: ResponsesRequest, response_id: str, model: str, created: int):
        self.request = request
        self.response_id = response_id
        self.model = model
        self.created = created
        self.status = "in_progress"
        self.output: list[dict[str, Any]] = []  # every item, as last sent
        self.usage: dict[str, Any] | None = None
        self.incomplete_details: dict[str, str] | None = None
        self.error: dict[str, str] | None = None
        self._sequence = 0
        self._open: dict[str, Any] | None = None  # the item still receiving deltas
        self._item_status = "completed"

    # -- the response object ---------------------------------------------------------------
    def response(self) -> dict[str, Any]:
        """The response object as the events so far have made it."""
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created,
            "status": self.status,
            "background": False,
            "error": self.error,
            "incomplete_details": self.incomplete_details,
            "model": self.model,
            "output": [copy_item(item) for item in self.output],
            "usage": self.usage,
            **self.request.settings,
        }

    # -- events ----------------------------------------------------------------------------
    def start(self) -> list[Event]:
        return [self._lifecycle("response.created"), self._lifecycle("response.in_progress")]

    def add_reasoning(self, text: str) -> list[Event]:
        """New thoughts, in the reasoning item (opened first, before any other item)."""
        events = []
        if not self._is_open("reasoning"):
            item = reasoning_item(self._item_id("rs"))
            events = self._close() + self._open_with_part(item, reasoning_part())
        item = self._open_item()
        item["content"][0]["text"] += text
        where = self._where(item)
        events.append(self._event("response.reasoning_text.delta", **where, delta=text))
        return events

    def add_text(self, text: str, logprobs: list[TokenLogprob]) -> list[Event]:
        if not text and not logprobs:
            return []
        events = [] if self._is_open("message") else self._close() + self._open_message()
        item = self._open
        assert item is not None
        part = item["content"][0]
        part["text"] += text
        delta_logprobs = [logprob(entry, with_bytes=False) for entry in self._kept(logprobs)]
        part["logprobs"] += [logprob(entry, with_bytes=True) for entry in self._kept(logprobs)]
        delta = {"delta": text, "logprobs": delta_logprobs}
        events.append(self._event("response.output_text.delta", **self._where(item), **delta))
        return events

    def add_tool_parts(self, parts: list[ToolCallDelta]) -> list[Event]:
        events: list[Event] = []
        for part in parts:
            if part.name is not None:
                events += self._close()
                item = {
                    "id": self._item_id("fc"),
                    "type": "function_call",
                    "status": "in_progress",
                    "arguments": "",
                    "call_id": f"call_{part.id}",
                    "name": part.name,
                }
                events += self._add(item)
            if part.arguments and self._is_open("function_call"):
                item = self._open_item()
                item["arguments"] += part.arguments
                where = {"item_id": item["id"], "output_index": len(self.output) - 1}
                delta = part.arguments
                events.append(
                    self._event("response.function_call_arguments.delta", **where, delta=delta)
                )
        return events

    def end_output(self, reason: FinishReason | None) -> list[Event]:
        """The answer's end: its open item done (incomplete if a budget ran out), and an
        empty message if it said nothing at all.

        Only the client's own `max_output_tokens` makes the response `incomplete`. A request
        without one was cut by the server (`--default-max-tokens`, or the context's end):
        its response is `completed`, the cut item `incomplete`. Agents that never set a
        budget (Codex) fail a whole turn on `response.incomplete`."""
        if reason == FinishReason.LENGTH:
            self._item_status = "incomplete"
            if self.request.settings.get("max_output_tokens") is not None:
                self.incomplete_details = {"reason": "max_output_tokens"}
        events = [] if self.output else self._open_message()
        return events + self._close()

    def finish(self, prompt_tokens: int, cached_tokens: int, output_tokens: int) -> list[Event]:
        """`response.completed`, or `response.incomplete` when the budget ran out."""
        self.usage = {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + output_tokens,
        }
        incomplete = self.incomplete_details is not None
        self.status = "incomplete" if incomplete else "completed"
        return [self._lifecycle(f"response.{self.status}")]

    def fail(self, error: GatewayError) -> list[Event]:
        """`response.failed`, carrying the error, after whatever was under way."""
        self._item_status = "incomplete"
        events = self._close()
        self.status = "failed"
        code = "rate_limit_exceeded" if error.kind.openai_status == 429 else "server_error"
        self.error = {"code": code, "message": error.message}
        return [*events, self._lifecycle("response.failed")]

    # -- items -----------------------------------------------------------------------------
    def _open_message(self) -> list[Event]:
        return self._open_with_part(message_item(self._item_id("msg")), text_part())

    def _open_with_part(self, item: dict[str, Any], part: dict[str, Any]) -> list[Event]:
        """A message or reasoning item added, then its one content part."""
        events = self._add(item)
        item["content"].append(part)
        where = self._where(item)
        events.append(self._event("response.content_part.added", **where, part=copy_part(part)))
        return events

    def _add(self, item: dict[str, Any]) -> list[Event]:
        self.output.append(item)
        self._open = item
        return [
            self._event(
                "response.output_item.added",
                output_index=len(self.output) - 1,
                item=copy_item(item),
            )
        ]

    def _close(self) -> list[Event]:
        """The open item's done events, if one is open."""
        item, self._open = self._open, None
        if item is None:
            return []
        index = len(self.output) - 1
        item["status"] = self._item_status
        events = []
        if item["type"] in ("message", "reasoning"):
            part = item["content"][0]
            where = self._where(item)
            if item["type"] == "reasoning":
                done = self._event("response.reasoning_text.done", **where, text=part["text"])
            else:
                logprobs = [without_bytes(entry) for entry in part["logprobs"]]
                text = part["text"]
                done = self._event(
                    "response.output_text.done", **where, text=text, logprobs=logprobs
                )
            events.append(done)
            events.append(self._event("response.content_part.done", **where, part=copy_part(part)))
        else:
            where = {"item_id": item["id"], "output_index": index}
            arguments = item["arguments"]
            events.append(
                self._event("response.function_call_arguments.done", **where, arguments=arguments)
            )
        events.append(
            self._event("response.output_item.done", output_index=index, item=copy_item(item))
        )
        return events

    def _is_open(self, kind: str) -> bool:
        return self._open is not None and self._open["type"] == kind

    def _open_item(self) -> dict[str, Any]:
        assert self._open is not None
        return self._open

    def _where(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": len(self.output) - 1, "content_index": 0}

    def _item_id(self, prefix: str) -> str:
        return f"{prefix}_{self.response_id.removeprefix('resp_')}_{len(self.output)}"

    def _kept(self, logprobs: list[TokenLogprob]) -> list[TokenLogprob]:
        return logprobs if self.request.logprobs else []

    def _lifecycle(self, kind: str) -> Event:
        return self._event(kind, response=self.response())

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event
