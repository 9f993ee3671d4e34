"""OpenAI /v1/responses: parse requests, stream the Responses API's events, fold and store them."""

from __future__ import annotations

from typing import Any

from common.sampling_params import SamplingParams
from common.token_output import TokenLogprob, ToolCallDelta
from gateway.errors import GatewayError, openai_error
from gateway.protocols.base import (
    ChatRequest,
    ChatResult,
    ChoiceResult,
    ResponseBuilder,
    StreamState,
    sse_event,
)
from gateway.protocols.bodies import ToolSettings, checked_params
from gateway.protocols.responses_body import AllowedTools, ResponsesBody
from gateway.protocols.responses_input import (
    input_item_objects,
    input_messages,
    output_messages,
)
from gateway.protocols.responses_stream import Event, ResponsesRequest, ResponseStream
from gateway.protocols.structured import openai_response_format
from gateway.protocols.tools import responses_tools
from gateway.response_store import ResponseStore

IGNORED_TOOLS_HEADER = "X-AstrAI-Ignored-Tools"
LOGPROBS = "message.output_text.logprobs"  # the `include` value that returns them


class ResponsesResponseBuilder(ResponseBuilder):
    """The Responses API: one output per request (no `n`), named SSE events numbered from 0,
    and with `store` (the API's default) the response kept in `store` for
    `previous_response_id` and GET / DELETE /v1/responses/{id}."""

    name = "responses"
    id_prefix = "resp_"

    def __init__(self, store: ResponseStore) -> None:
        self.store = store

    def parse(self, body: Any) -> ChatRequest:
        request = ResponsesBody.parse(body)
        history: list[dict[str, Any]] = []
        if request.previous_response_id is not None:
            history = self.store.conversation(request.previous_response_id)
        history += input_messages(request.input or [])
        messages = list(history)
        if request.instructions:
            messages.insert(0, {"role": "system", "content": request.instructions})
        if not messages:
            raise GatewayError.invalid("input must hold at least one message", "input")
        tools, ignored = responses_tools(request)
        return ResponsesRequest(
            model=request.model,
            messages=messages,
            params=_params(request, tools),
            stream=bool(request.stream),
            settings=_settings(request, tools),
            history=history,
            store=request.store is not False,
            logprobs=LOGPROBS in (request.include or []),
            ignored_tools=tuple(ignored),
            input_items=list(request.input or []),
        )

    def response_headers(self, request: ChatRequest) -> dict[str, str]:
        ignored = request.ignored_tools if isinstance(request, ResponsesRequest) else ()
        return {IGNORED_TOOLS_HEADER: ", ".join(ignored)} if ignored else {}

    def format_response(self, result: ChatResult) -> dict[str, Any]:
        """The stream's fold: the same events made from the finished result, their response."""
        assert result.request is not None, "a fold's result keeps its request"
        state = StreamState(
            request_id=result.request_id,
            model=result.model,
            created=result.created,
            request=result.request,
            prompt_tokens=result.prompt_tokens,
            cached_tokens=result.cached_tokens,
            completion_tokens=result.completion_tokens,
        )
        choice = result.choices[0]
        self.stream_start(state)
        if choice.reasoning:
            self.stream_reasoning(state, 0, choice.reasoning)
        self.stream_tokens(state, 0, choice.text, choice.logprobs)
        parts = [
            part
            for i, call in enumerate(choice.tool_calls)
            for part in (
                ToolCallDelta(i, call.id, call.name),
                ToolCallDelta(i, None, None, call.arguments),
            )
        ]
        self.stream_tool_calls(state, 0, parts)
        self.stream_choice_end(state, choice)
        self.stream_end(state)
        return _stream(state).response()

    def stream_start(self, state: StreamState) -> list[str]:
        request = state.request
        assert isinstance(request, ResponsesRequest)
        stream = ResponseStream(request, state.request_id, state.model, state.created)
        state.flags["stream"] = stream
        return _sse(stream.start())

    def stream_tokens(
        self, state: StreamState, index: int, text: str, logprobs: list[TokenLogprob]
    ) -> list[str]:
        return _sse(_stream(state).add_text(text, logprobs))

    def stream_reasoning(self, state: StreamState, index: int, text: str) -> list[str]:
        return _sse(_stream(state).add_reasoning(text))

    def stream_tool_calls(
        self, state: StreamState, index: int, parts: list[ToolCallDelta]
    ) -> list[str]:
        return _sse(_stream(state).add_tool_parts(parts))

    def stream_choice_end(self, state: StreamState, choice: ChoiceResult) -> list[str]:
        return _sse(_stream(state).end_output(choice.finish_reason))

    def stream_end(self, state: StreamState) -> list[str]:
        stream = _stream(state)
        events = stream.finish(state.prompt_tokens, state.cached_tokens, state.completion_tokens)
        if stream.request.store:
            response = stream.response()
            conversation = stream.request.history + output_messages(response["output"])
            items = input_item_objects(stream.request.input_items, stream.response_id)
            self.store.put(response, conversation, items)
        return _sse(events)

    def stream_error(self, state: StreamState, error: GatewayError) -> list[str]:
        return _sse(_stream(state).fail(error))

    def error_body(self, error: GatewayError) -> tuple[int, dict[str, Any]]:
        return openai_error(error)


def _params(body: ResponsesBody, tools: ToolSettings) -> SamplingParams:
    """The request's settings; the API has one output per request."""
    text_format = body.text.format if body.text is not None else None
    structured = None
    if text_format is not None:
        structured = openai_response_format(text_format.response_format(), "text.format")
    # Logprobs come back only when `include` asks for them; top_logprobs says how many more.
    logprobs = LOGPROBS in (body.include or [])
    return checked_params(
        tools,
        n=1,
        max_tokens=body.max_output_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        logprobs=True if logprobs else None,
        top_logprobs=body.top_logprobs if logprobs else None,
        structured_output=structured,
        drop_oldest_turns=True if body.truncation == "auto" else None,
    )


def _settings(body: ResponsesBody, tools: ToolSettings) -> dict[str, Any]:
    """The request's settings as the response object echoes them, OpenAI's defaults filled."""
    served = [
        tool.model_dump(exclude_none=True) for tool in body.tools or [] if tool.type == "function"
    ]
    text_format = body.text.format if body.text is not None else None
    reasoning = body.reasoning
    return {
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "max_tool_calls": None,
        "parallel_tool_calls": (
            tools.parallel_tool_calls
            if tools.parallel_tool_calls is not None
            else body.parallel_tool_calls is not False
        ),
        "previous_response_id": body.previous_response_id,
        "reasoning": {
            "effort": reasoning.effort if reasoning else None,
            "summary": reasoning.summary if reasoning else None,
        },
        "service_tier": "default",
        "store": body.store is not False,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "text": {
            "format": (
                text_format.model_dump(by_alias=True, exclude_none=True)
                if text_format is not None
                else {"type": "text"}
            ),
            "verbosity": (body.text.verbosity if body.text else None) or "medium",
        },
        "tool_choice": _tool_choice(body),
        "tools": served,
        "top_logprobs": body.top_logprobs or 0,
        "top_p": 1.0 if body.top_p is None else body.top_p,
        "truncation": body.truncation or "disabled",
        "user": body.user,
        "metadata": body.metadata or {},
        "prompt_cache_key": body.prompt_cache_key,
        "safety_identifier": body.safety_identifier,
    }


def _tool_choice(body: ResponsesBody) -> Any:
    """`tool_choice` as the response object echoes it."""
    choice = body.tool_choice
    if isinstance(choice, dict):
        return {"type": "function", "name": choice["name"]}
    if isinstance(choice, AllowedTools):
        tools = [{"type": "function", "name": name} for name in choice.names]
        return {"type": "allowed_tools", "mode": choice.mode, "tools": tools}
    return choice or "auto"


def _stream(state: StreamState) -> ResponseStream:
    stream = state.flags["stream"]
    assert isinstance(stream, ResponseStream)
    return stream


def _sse(events: list[Event]) -> list[str]:
    return [sse_event(event["type"], event) for event in events]
