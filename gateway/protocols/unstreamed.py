"""UnstreamedBuilder: an OpenAI-style route answered once, whose stream methods are never called."""

from __future__ import annotations

from typing import NoReturn

from common.token_output import TokenLogprob, ToolCallDelta
from gateway.protocols.base import ChoiceResult, StreamState
from gateway.protocols.openai_common import OpenAIStreamBuilder


class UnstreamedBuilder(OpenAIStreamBuilder):
    """A route whose requests never stream (embeddings, rerank): its parse sets no stream,
    so the handler folds the worker's events (one Finished per input) into one answer and
    the stream methods are unreachable; errors in OpenAI's shape."""

    def stream_start(self, state: StreamState) -> list[str]:
        _never_streamed(self.name)

    def stream_tokens(
        self, state: StreamState, index: int, text: str, logprobs: list[TokenLogprob]
    ) -> list[str]:
        _never_streamed(self.name)

    def stream_tool_calls(
        self, state: StreamState, index: int, parts: list[ToolCallDelta]
    ) -> list[str]:
        _never_streamed(self.name)

    def stream_choice_end(self, state: StreamState, choice: ChoiceResult) -> list[str]:
        _never_streamed(self.name)


def _never_streamed(route: str) -> NoReturn:
    raise RuntimeError(f"a {route} request is never streamed (parse sets no stream)")
