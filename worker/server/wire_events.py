"""A scheduler event as the wire messages that carry it to the gateway."""

from __future__ import annotations

from common.embedding import pack_vector
from common.schemas import Finished, Message, Tokens
from worker.engine.sequence import TokenEvent


def to_wire(event: TokenEvent) -> list[Message]:
    """A scheduler event as wire messages: its text and tokens, then its end if it ended."""
    messages: list[Message] = []
    if event.token_ids or event.text or event.tool_calls or event.reasoning:
        # The event's logprobs and tool-call parts are the wire's own structs.
        messages.append(
            Tokens(
                event.request_id,
                event.index,
                event.text,
                list(event.token_ids),
                list(event.logprobs) or None,
                list(event.tool_calls) or None,
                None if event.prompt_logprobs is None else list(event.prompt_logprobs),
                event.reasoning,
            )
        )
    if event.finish_reason is not None:
        usage = event.usage
        messages.append(
            Finished(
                request_id=event.request_id,
                index=event.index,
                finish_reason=event.finish_reason,
                prompt_tokens=usage.prompt_tokens if usage else 0,
                completion_tokens=usage.completion_tokens if usage else 0,
                cached_tokens=usage.cached_tokens if usage else 0,
                cache_written_tokens=usage.cache_written_tokens if usage else 0,
                stop=event.stop,
                error=event.error,
                embedding=None
                if event.embedding is None
                else pack_vector(event.embedding.tolist()),
                score=event.score,
            )
        )
    return messages
