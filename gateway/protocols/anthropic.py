"""Anthropic /v1/messages: parse requests, shape bodies, stream named events and errors."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from common.token_output import FinishReason, TokenLogprob, ToolCallDelta
from gateway.errors import GatewayError, anthropic_error
from gateway.protocols.anthropic_billing import without_billing_header
from gateway.protocols.anthropic_body import MessagesBody
from gateway.protocols.anthropic_context import applied_edits, thinking_turns_kept
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
    """Messages API: a thinking block (a reasoning model's thoughts), a text block and
    tool_use blocks, streamed as named SSE events; each block is closed before the next
    starts, and a block starts when its first content arrives."""

    name = "anthropic"
    id_prefix = "msg_"

    def parse(self, body: Any) -> ChatRequest:
        request = MessagesBody.parse(body)
        kept = thinking_turns_kept(request.context_management)
        messages = anthropic_messages(request.messages, kept)
        system = without_billing_header(request.system)
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        output_format = request.output_config.format if request.output_config else None
        structured = anthropic_output_format(output_format)
        tools = anthropic_tools(request)
        # A template that can turn its reasoning off (Qwen3's) renders it off.
        thinking_off = request.thinking is not None and request.thinking.type == "disabled"
        last = messages[-1]
        # A final assistant turn is a prefill the answer continues, as Anthropic does.
        prefill = last["role"] == "assistant" and last["content"] and not last.get("tool_calls")
        stops = request.stop_sequences
        # The API has no n. A max_tokens past what the context leaves is cut to it, the
        # answer then ending with max_tokens (Claude Code always asks for 32000 or more).
        params = checked_params(
            tools,
            max_tokens=request.max_tokens,
            clamp_max_tokens=True,
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k,
            stop=None if stops is None else tuple(stops),
            structured_output=structured,
            chat_template_kwargs={"enable_thinking": False} if thinking_off else None,
            continue_final_message=True if prefill else None,
        )
        response_fields: dict[str, Any] = {}
        if request.context_management is not None:
            edits = applied_edits(request.context_management, request.messages)
            response_fields["context_management"] = {"applied_edits": edits}
        return ChatRequest(
            model=request.model,
            messages=messages,
            params=params,
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
            "usage": {
                **_input_usage(
                    result.prompt_tokens, result.cached_tokens, result.cache_written_tokens
                ),
                "output_tokens": result.completion_tokens,
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
        return [sse_event("message_start", {"type": "message_start", "message": message})]

    def stream_reasoning(self, state: StreamState, index: int, text: str) -> list[str]:
        blocks = _blocks(state)
        events = [] if blocks.open == "thinking" else blocks.start({"type": "thinking"})
        blocks.thinking += text
        return [*events, blocks.delta({"type": "thinking_delta", "thinking": text})]

    def stream_tokens(
        self, state: StreamState, index: int, text: str, logprobs: list[TokenLogprob]
    ) -> list[str]:
        if not text:
            return []
        blocks = _blocks(state)
        events = [] if blocks.open == "text" else blocks.start({"type": "text"})
        return [*events, blocks.delta({"type": "text_delta", "text": text})]

    def stream_tool_calls(
        self, state: StreamState, index: int, parts: list[ToolCallDelta]
    ) -> list[str]:
        # A forced call follows an empty text block (unless thoughts came first).
        blocks = _blocks(state)
        events = [] if blocks.open is not None else blocks.start({"type": "text"})
        for part in parts:
            if part.name is not None:
                start = {"type": "tool_use", "id": f"toolu_{part.id}", "name": part.name}
                events += blocks.start({**start, "input": {}})
            if part.arguments:
                events.append(
                    blocks.delta({"type": "input_json_delta", "partial_json": part.arguments})
                )
        return events

    def stream_choice_end(self, state: StreamState, choice: ChoiceResult) -> list[str]:
        stop_reason, stop_sequence = _stop_reason(choice)
        message_delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            # Cumulative, as Anthropic sends it: message_start could only say the whole
            # prompt, as the cache's share is known once the worker has admitted it.
            "usage": {
                **_input_usage(
                    state.prompt_tokens, state.cached_tokens, state.cache_written_tokens
                ),
                "output_tokens": choice.completion_tokens,
            },
            **state.request.response_fields,
        }
        blocks = _blocks(state)
        events = [] if blocks.open is not None else blocks.start({"type": "text"})
        return [*events, *blocks.stop(), sse_event("message_delta", message_delta)]

    def stream_end(self, state: StreamState) -> list[str]:
        return [sse_event("message_stop", {"type": "message_stop"})]

    def stream_error(self, state: StreamState, error: GatewayError) -> list[str]:
        _, body = anthropic_error(error)
        return [sse_event("error", body)]

    def error_body(self, error: GatewayError) -> tuple[int, dict[str, Any]]:
        return anthropic_error(error)


def signature(thinking: str) -> str:
    """A thinking block's `signature`: a digest of its text (Anthropic's is an encrypted
    proof; nothing here checks one that comes back)."""
    return base64.b64encode(hashlib.sha256(thinking.encode("utf-8", "replace")).digest()).decode()


class _Blocks:
    """The content blocks of one streamed message: which is open, and the thinking so far
    (its signature closes it)."""

    def __init__(self) -> None:
        self.index = -1
        self.open: str | None = None
        self.thinking = ""

    def start(self, block: dict[str, Any]) -> list[str]:
        events = self.stop()
        self.index, self.open = self.index + 1, block["type"]
        if block["type"] == "thinking":
            block = {**block, "thinking": "", "signature": ""}
        elif block["type"] == "text":
            block = {**block, "text": ""}
        payload = {"type": "content_block_start", "index": self.index, "content_block": block}
        return [*events, sse_event("content_block_start", payload)]

    def delta(self, delta: dict[str, Any]) -> str:
        payload = {"type": "content_block_delta", "index": self.index, "delta": delta}
        return sse_event("content_block_delta", payload)

    def stop(self) -> list[str]:
        if self.open is None:
            return []
        events = []
        if self.open == "thinking":
            events.append(
                self.delta({"type": "signature_delta", "signature": signature(self.thinking)})
            )
        self.open = None
        stop = {"type": "content_block_stop", "index": self.index}
        return [*events, sse_event("content_block_stop", stop)]


def _blocks(state: StreamState) -> _Blocks:
    blocks = state.flags.setdefault("blocks", _Blocks())
    assert isinstance(blocks, _Blocks)
    return blocks


def _content(choice: ChoiceResult) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if choice.reasoning:
        thinking = choice.reasoning
        blocks.append({"type": "thinking", "thinking": thinking, "signature": signature(thinking)})
    if choice.text or not (choice.tool_calls or choice.reasoning):
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


def _input_usage(prompt_tokens: int, cached_tokens: int, written_tokens: int) -> dict[str, int]:
    """The prompt's tokens as Anthropic counts them, the three adding up to the prompt:
    read from the cache, computed into it (kept for later prompts), and the rest."""
    return {
        "input_tokens": prompt_tokens - cached_tokens - written_tokens,
        "cache_creation_input_tokens": written_tokens,
        "cache_read_input_tokens": cached_tokens,
    }
