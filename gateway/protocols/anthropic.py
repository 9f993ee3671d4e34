"""Anthropic /v1/messages: parse requests, shape bodies, stream named events and errors."""

from __future__ import annotations

import json
from typing import Any

from common.token_output import FinishReason, TokenLogprob, ToolCallDelta
from gateway.errors import GatewayError, anthropic_error
from gateway.protocols.anthropic_body import MessagesBody
from gateway.protocols.anthropic_context import applied_edits
from gateway.protocols.base import (
    ChatRequest,
    ChatResult,
    ChoiceResult,
    ResponseBuilder,
    StreamState,
    sse_event,
)
from gateway.protocols.bodies import checked_params
from gateway.protocols.structured import anthropic_output_format
from gateway.protocols.tools import anthropic_messages, anthropic_tools


class AnthropicResponseBuilder(ResponseBuilder):
    """Messages API: one text content block, streamed as named SSE events."""

    name = "anthropic"
    id_prefix = "msg_"

    def parse(self, body: Any) -> ChatRequest:
        request = MessagesBody.parse(body)
        messages = anthropic_messages(request.messages)
        if request.system is not None:
            messages.insert(0, {"role": "system", "content": request.system})
        # The API has no n. A max_tokens past what the context leaves is cut to it, the
        # answer then ending with max_tokens (Claude Code always asks for 32000 or more).
        params: dict[str, Any] = {"max_tokens": request.max_tokens, "clamp_max_tokens": True}
        output_format = request.output_config.format if request.output_config else None
        optional = {
            "temperature": request.temperature,
            "top_p": request.top_p,
            "top_k": request.top_k,
            "stop": request.stop_sequences,
            "structured_output": anthropic_output_format(output_format),
        }
        params.update((key, value) for key, value in optional.items() if value is not None)
        params.update(anthropic_tools(request))
        last = messages[-1]
        if last["role"] == "assistant" and last["content"] and not last.get("tool_calls"):
            # A final assistant turn is a prefill the answer continues, as Anthropic does.
            params["continue_final_message"] = True
        response_fields: dict[str, Any] = {}
        if request.context_management is not None:
            edits = applied_edits(request.context_management, request.messages)
            response_fields["context_management"] = {"applied_edits": edits}
        return ChatRequest(
            model=request.model,
            messages=messages,
            params=checked_params(params),
            stream=bool(request.stream),
            metadata=request.metadata or {},
            response_fields=response_fields,
        )

    def format_response(self, result: ChatResult) -> dict[str, Any]:
        choice = min(result.choices, key=lambda c: c.index)  # one choice: n is always 1
        stop_reason, stop_sequence = _stop_reason(choice)
        return {
            "id": result.request_id,
            "type": "message",
            "role": "assistant",
            "model": result.model,
            "content": _content(choice),
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            # As Anthropic counts: input_tokens excludes what was read from the cache.
            "usage": {
                "input_tokens": result.prompt_tokens - result.cached_tokens,
                "output_tokens": result.completion_tokens,
                "cache_read_input_tokens": result.cached_tokens,
            },
            **(result.request.response_fields if result.request is not None else {}),
        }

    def stream_start(self, state: StreamState) -> list[str]:
        message: dict[str, Any] = {
            "id": state.request_id,
            "type": "message",
            "role": "assistant",
            "model": state.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": state.prompt_tokens, "output_tokens": 0},
        }
        block = {"type": "text", "text": ""}
        return [
            sse_event("message_start", {"type": "message_start", "message": message}),
            sse_event(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            ),
        ]

    def stream_tokens(
        self, state: StreamState, index: int, text: str, logprobs: list[TokenLogprob]
    ) -> list[str]:
        if not text:
            return []
        delta = {"type": "text_delta", "text": text}
        payload = {"type": "content_block_delta", "index": 0, "delta": delta}
        return [sse_event("content_block_delta", payload)]

    def stream_tool_calls(
        self, state: StreamState, index: int, parts: list[ToolCallDelta]
    ) -> list[str]:
        # Block 0 is the text block stream_start opened; each call is a tool_use block after it.
        events = []
        for part in parts:
            block = state.flags.get("block", 0)
            if part.name is not None:
                events.append(_block_stop(block))
                block = state.flags["block"] = block + 1
                start = {
                    "type": "tool_use",
                    "id": f"toolu_{part.id}",
                    "name": part.name,
                    "input": {},
                }
                payload = {"type": "content_block_start", "index": block, "content_block": start}
                events.append(sse_event("content_block_start", payload))
            if part.arguments:
                delta = {"type": "input_json_delta", "partial_json": part.arguments}
                payload = {"type": "content_block_delta", "index": block, "delta": delta}
                events.append(sse_event("content_block_delta", payload))
        return events

    def stream_choice_end(self, state: StreamState, choice: ChoiceResult) -> list[str]:
        stop_reason, stop_sequence = _stop_reason(choice)
        message_delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            # Cumulative, as Anthropic sends it: message_start could only say the whole
            # prompt, as the cache's share is known once the worker has admitted it.
            "usage": {
                "input_tokens": state.prompt_tokens - state.cached_tokens,
                "cache_read_input_tokens": state.cached_tokens,
                "output_tokens": choice.completion_tokens,
            },
            **state.request.response_fields,
        }
        return [_block_stop(state.flags.get("block", 0)), sse_event("message_delta", message_delta)]

    def stream_end(self, state: StreamState) -> list[str]:
        return [sse_event("message_stop", {"type": "message_stop"})]

    def stream_error(self, state: StreamState, error: GatewayError) -> list[str]:
        _, body = anthropic_error(error)
        return [sse_event("error", body)]

    def error_body(self, error: GatewayError) -> tuple[int, dict[str, Any]]:
        return anthropic_error(error)


def _block_stop(index: int) -> str:
    return sse_event("content_block_stop", {"type": "content_block_stop", "index": index})


def _content(choice: ChoiceResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if choice.text or not choice.tool_calls:
        blocks.append({"type": "text", "text": choice.text})
    for call in choice.tool_calls:
        try:
            arguments = json.loads(call.arguments)
        except ValueError:  # cut short by max_tokens
            arguments = {}
        blocks.append(
            {"type": "tool_use", "id": f"toolu_{call.id}", "name": call.name, "input": arguments}
        )
    return blocks


def _stop_reason(choice: ChoiceResult) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence): a matched stop string is a stop_sequence, EOS end_turn."""
    if choice.finish_reason == FinishReason.LENGTH:
        return "max_tokens", None
    if choice.finish_reason == FinishReason.TOOL_CALLS:
        return "tool_use", None
    if choice.finish_reason == FinishReason.STOP and isinstance(choice.stop, str):
        return "stop_sequence", choice.stop
    return "end_turn", None
