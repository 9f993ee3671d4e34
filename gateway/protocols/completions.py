"""OpenAI's legacy /v1/completions: raw prompts (text or token ids) in, `text_completion` out."""

from __future__ import annotations

from typing import Any

from common.token_output import TokenLogprob, ToolCallDelta
from gateway.errors import GatewayError
from gateway.protocols.base import (
    ChatRequest,
    ChatResult,
    ChoiceResult,
    StreamState,
)
from gateway.protocols.completions_body import CompletionsBody
from gateway.protocols.openai_common import (
    OpenAIStreamBuilder,
    finish_reason,
    usage_body,
    vllm_prompt_logprobs,
)

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for this API (the chat API has none)
MAX_CHOICES = 1024  # prompts × n in one request


class CompletionsResponseBuilder(OpenAIStreamBuilder):
    """Completions: each prompt is its own generation of n choices, numbered prompt-major
    (prompt p's choice i is p * n + i); streamed as `data:` chunks of text deltas."""

    name = "completions"
    id_prefix = "cmpl-"
    chunk_object = "text_completion"

    def parse(self, body: Any) -> ChatRequest:
        completion = CompletionsBody.parse(body)
        completion.check_prompt_logprobs()
        logprobs, prompt_logprobs = completion.logprobs, completion.prompt_logprobs
        if logprobs is not None and completion.echo:
            # The echoed prompt's tokens come with their logprobs too.
            prompt_logprobs = max(prompt_logprobs or 0, logprobs)
        n, best_of = completion.n or 1, completion.best_of
        if best_of is not None and best_of != n:
            message = f"best_of must equal n ({n}) if given, got {best_of}"
            raise GatewayError.invalid(message, "best_of")
        prompts = completion.prompt
        if len(prompts) * n > MAX_CHOICES:
            message = f"prompts × n may be at most {MAX_CHOICES}, got {len(prompts) * n}"
            raise GatewayError.invalid(message, "prompt")
        params = completion.sampling_params(
            max_tokens=completion.max_tokens or DEFAULT_MAX_TOKENS,
            prompt_logprobs=prompt_logprobs,
            logprobs=True if logprobs is not None else None,
            top_logprobs=logprobs,
        )
        return ChatRequest(
            model=completion.model,
            messages=[],
            params=params,
            stream=bool(completion.stream),
            include_usage=completion.include_usage,
            prompts=prompts,
            echo=bool(completion.echo),
        )

    def format_response(self, result: ChatResult) -> dict[str, Any]:
        return {
            "id": result.request_id,
            "object": "text_completion",
            "created": result.created,
            "model": result.model,
            "choices": [
                {
                    **_choice(c.index, c.text, _logprobs(c.logprobs), finish_reason(c)),
                    **vllm_prompt_logprobs(c),
                }
                for c in sorted(result.choices, key=lambda choice: choice.index)
            ],
            "usage": usage_body(
                result.prompt_tokens, result.completion_tokens, result.cached_tokens
            ),
        }

    def stream_start(self, state: StreamState) -> list[str]:
        return []  # no role chunk in this API: the first chunk holds text

    def stream_tokens(
        self, state: StreamState, index: int, text: str, logprobs: list[TokenLogprob]
    ) -> list[str]:
        if not text and not logprobs:
            return []
        # text_offset counts on from where this choice's previous chunk ended.
        offsets: dict[int, int] = state.flags.setdefault("text_offsets", {})
        start = offsets.get(index, 0)
        offsets[index] = start + sum(len(entry.text) for entry in logprobs)
        return [self.chunk(state, [_choice(index, text, _logprobs(logprobs, start))])]

    def stream_tool_calls(
        self, state: StreamState, index: int, parts: list[ToolCallDelta]
    ) -> list[str]:
        return []  # this API takes no tools, so its choices make no calls

    def stream_choice_end(self, state: StreamState, choice: ChoiceResult) -> list[str]:
        return [self.chunk(state, [_choice(choice.index, "", None, finish_reason(choice))])]


def _logprobs(entries: list[TokenLogprob], text_offset: int = 0) -> dict[str, Any] | None:
    """OpenAI's legacy logprobs object; `text_offset` is each token's start in the text."""
    if not entries:
        return None
    offsets = []
    for entry in entries:
        offsets.append(text_offset)
        text_offset += len(entry.text)
    return {
        "tokens": [entry.text for entry in entries],
        "token_logprobs": [entry.logprob for entry in entries],
        # An echoed prompt's first token has no logprob, and no alternatives either.
        "top_logprobs": [
            None if entry.logprob is None else {top.text: top.logprob for top in entry.top}
            for entry in entries
        ],
        "text_offset": offsets,
    }


def _choice(
    index: int, text: str, logprobs: dict[str, Any] | None, finish: str | None = None
) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}
