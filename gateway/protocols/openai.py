"""OpenAI /v1/chat/completions: parse requests, shape bodies, stream chunks and errors."""

from __future__ import annotations

from typing import Any

from common.sampling_params import SamplingParams
from common.token_output import TokenLogprob, ToolCallDelta
from gateway.protocols.base import (
    ChatRequest,
    ChatResult,
    ChoiceResult,
    StreamState,
)
from gateway.protocols.chat_body import ChatBody
from gateway.protocols.openai_common import (
    OpenAIStreamBuilder,
    finish_reason,
    usage_body,
    vllm_prompt_logprobs,
)
from gateway.protocols.structured import openai_response_format
from gateway.protocols.tools import openai_messages, openai_tools


class OpenAIResponseBuilder(OpenAIStreamBuilder):
    """Chat Completions, streamed as `data:` chunks ending in `data: [DONE]`."""

    name = "openai"
    id_prefix = "chatcmpl-"
    chunk_object = "chat.completion.chunk"

    def parse(self, body: Any) -> ChatRequest:
        chat = ChatBody.parse(body)
        return ChatRequest(
            model=chat.model,
            messages=openai_messages(chat.messages),
            params=_params(chat),
            stream=bool(chat.stream),
            include_usage=chat.include_usage,
        )

    def format_response(self, result: ChatResult) -> dict[str, Any]:
        choices = sorted(result.choices, key=lambda choice: choice.index)
        return {
            "id": result.request_id,
            "object": "chat.completion",
            "created": result.created,
            "model": result.model,
            "choices": [
                {
                    "index": choice.index,
                    "message": _message(choice),
                    "logprobs": _logprobs(choice.logprobs),
                    "finish_reason": finish_reason(choice),
                    **vllm_prompt_logprobs(choice),
                }
                for choice in choices
            ],
            "usage": usage_body(
                result.prompt_tokens, result.completion_tokens, result.cached_tokens
            ),
        }

    def stream_start(self, state: StreamState) -> list[str]:
        return [
            self.chunk(state, [_delta(index, {"role": "assistant", "content": ""})])
            for index in range(state.request.n)
        ]

    def stream_tokens(
        self, state: StreamState, index: int, text: str, logprobs: list[TokenLogprob]
    ) -> list[str]:
        if not text and not logprobs:
            return []
        return [self.chunk(state, [_delta(index, {"content": text}, _logprobs(logprobs))])]

    def stream_reasoning(self, state: StreamState, index: int, text: str) -> list[str]:
        return [self.chunk(state, [_delta(index, _reasoning(text))])]

    def stream_tool_calls(
        self, state: StreamState, index: int, parts: list[ToolCallDelta]
    ) -> list[str]:
        chunks = []
        for part in parts:
            call: dict[str, Any] = {"index": part.index}
            if part.name is not None:
                call.update(id=f"call_{part.id}", type="function")
                call["function"] = {"name": part.name, "arguments": part.arguments}
            else:
                call["function"] = {"arguments": part.arguments}
            chunks.append(self.chunk(state, [_delta(index, {"tool_calls": [call]})]))
        return chunks

    def stream_choice_end(self, state: StreamState, choice: ChoiceResult) -> list[str]:
        return [self.chunk(state, [_delta(choice.index, {}, None, finish_reason(choice))])]


def _params(body: ChatBody) -> SamplingParams:
    """The shared settings, then the chat route's own."""
    body.check_prompt_logprobs()
    structured = openai_response_format(body.response_format)
    tools = openai_tools(body)
    return body.sampling_params(
        # max_completion_tokens replaced max_tokens; both are checked, the newer one wins.
        max_tokens=body.max_completion_tokens or body.max_tokens,
        prompt_logprobs=body.prompt_logprobs,
        logprobs=body.logprobs,
        top_logprobs=body.top_logprobs,
        structured_output=structured,
        chat_template_kwargs=body.chat_template_kwargs,
        tools=tools,
    )


def _message(choice: ChoiceResult) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", **_reasoning(choice.reasoning)}
    if not choice.tool_calls:
        return {**message, "content": choice.text}
    return {
        **message,
        "content": choice.text or None,
        "tool_calls": [
            {
                "id": f"call_{call.id}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in choice.tool_calls
        ],
    }


def _reasoning(text: str) -> dict[str, str]:
    """A reasoning model's thoughts under both names clients read: vLLM's
    `reasoning_content`, and `reasoning`, which newer clients read."""
    return {"reasoning_content": text, "reasoning": text} if text else {}


def _logprobs(logprobs: list[TokenLogprob]) -> dict[str, Any] | None:
    if not logprobs:
        return None
    return {
        "content": [
            {
                **_token_logprob(entry.text, entry.logprob),
                "top_logprobs": [_token_logprob(top.text, top.logprob) for top in entry.top],
            }
            for entry in logprobs
        ]
    }


def _token_logprob(token: str, logprob: float | None) -> dict[str, Any]:
    # errors="replace": a token that is half a code point must not fail the response.
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8", "replace"))}


def _delta(
    index: int,
    delta: dict[str, Any],
    logprobs: dict[str, Any] | None = None,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
