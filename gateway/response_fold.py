"""A non-streamed answer: the events a stream would send, folded into one ChatResult."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from gateway.protocols.base import ChatResult, ChoiceResult, StreamState
from gateway.request_events import ChoiceEnd, Failed, RequestEvent, Restarted, TokenDelta


def empty_result(state: StreamState) -> ChatResult:
    """The fold's start: every choice with no text yet."""
    return ChatResult(
        request_id=state.request_id,
        model=state.model,
        created=state.created,
        choices=[ChoiceResult(index=i) for i in range(state.request.num_choices)],
        prompt_tokens=state.prompt_tokens,
        request=state.request,
    )


def add_event(result: ChatResult, event: RequestEvent) -> None:
    """One step of the fold; a failure raises its error (the answer is that error)."""
    if isinstance(event, TokenDelta):
        choice = result.choices[event.index]
        choice.reasoning += event.reasoning
        choice.text += event.text
        choice.logprobs.extend(event.logprobs)
        if event.prompt_logprobs is not None:
            choice.prompt_logprobs = event.prompt_logprobs
        choice.add_tool_call_parts(event.tool_calls)
    elif isinstance(event, ChoiceEnd):
        choice = result.choices[event.index]
        choice.finish_reason = event.finish_reason
        choice.stop = event.stop
        choice.completion_tokens = event.completion_tokens
        choice.embedding = event.embedding
        choice.score = event.score
    elif isinstance(event, Failed):
        raise event.error


async def fold_events(state: StreamState, events: AsyncGenerator[RequestEvent, None]) -> ChatResult:
    """Every event of an accepted request, folded; the cached prompt tokens are those the
    events counted in `state`, as a stream reports them."""
    result = empty_result(state)
    async with contextlib.aclosing(events):
        async for event in events:
            if isinstance(event, Restarted):  # another worker answers from the start
                result = empty_result(state)
                continue
            add_event(result, event)
    result.cached_tokens = state.cached_tokens
    result.cache_written_tokens = state.cache_written_tokens
    return result
