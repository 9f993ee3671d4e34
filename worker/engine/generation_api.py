"""GenerationAPI: text for plain prompts over submit/abort, blocking, streamed or async."""

from __future__ import annotations

import asyncio
import functools
import queue
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeGuard, cast

from common.sampling_params import SamplingParams
from worker.engine.engine_core import EngineCore
from worker.engine.event_stream import put_tagged, raise_on_error, until_finished
from worker.engine.request import GenerationRequest, Prompt, RequestFactory
from worker.engine.sequence import EventSink, TokenEvent


class GenerationAPI:
    """The seed API: every call submits through `submit` and, when its consumer stops early or
    fails, aborts through `abort` so the request's pages are freed at once. The engine sets
    `requests` and `scheduler` when it loads the model."""

    requests: RequestFactory
    scheduler: EngineCore

    def submit(
        self,
        prompt: Prompt,
        params: SamplingParams,
        sink: EventSink,
        request_id: str | None = None,
        chat: bool = True,
    ) -> tuple[str, int]:
        """Queue one request; events go to `sink` from the scheduler thread.

        Returns (request id, prompt tokens). Raises ValueError for bad input, with nothing
        queued.
        """
        request_id = request_id or self.requests.new_request_id()
        prompt_ids = self.requests.prompt_token_ids(prompt, chat, params)
        templated = self.requests.is_templated(prompt, chat)
        choices = self.requests.build(request_id, prompt_ids, params, sink, chat=templated)
        self.scheduler.add(choices)
        return request_id, len(prompt_ids)

    def abort(self, request_id: str) -> None:
        """Stop a request and free what it holds (at the next step)."""
        self.scheduler.abort(request_id)

    def _start(
        self, prompt: Prompt, chat: bool, params: SamplingParams, sink: EventSink
    ) -> tuple[str, int]:
        """Submit; (request id, number of choices)."""
        request_id, _ = self.submit(prompt, params, sink, chat=chat)
        return request_id, params.n

    def generate(
        self,
        prompt: Prompt | list[Prompt],
        stream: bool = False,
        chat: bool = True,
        **sampling: Any,
    ) -> Any:
        """str for a prompt, list[str] for a list of prompts; stream=True yields text pieces
        (for a list: (index, text) pairs). A list of role/content dicts is one chat prompt."""
        return self._generate(prompt, SamplingParams.from_kwargs(**sampling), stream, chat)

    def generate_with_request(self, request: GenerationRequest) -> Any:
        return self._generate(request.messages, request.params, request.stream, chat=True)

    def _generate(
        self, prompt: Prompt | list[Prompt], params: SamplingParams, stream: bool, chat: bool
    ) -> Any:
        if _is_batch(prompt):
            if stream:
                return self._stream_many(prompt, chat, params)
            return [self._generate(p, params, False, chat) for p in prompt]
        one = cast(Prompt, prompt)  # a list whose items are dicts is one chat's messages
        events: queue.Queue[TokenEvent] = queue.Queue()
        request_id, num_choices = self._start(one, chat, params, events.put)
        if stream:
            return self._stream_one(request_id, num_choices, events)
        texts = [""] * num_choices
        for _, event in until_finished(events, num_choices):
            texts[event.index] += event.text
        return texts[0] if num_choices == 1 else texts

    def _stream_one(
        self, request_id: str, num_choices: int, events: queue.Queue[TokenEvent]
    ) -> Iterator[str]:
        try:
            for _, event in until_finished(events, num_choices):
                if event.text:
                    yield event.text
        finally:
            self.abort(request_id)  # a consumer that stops early frees the pages at once

    def _stream_many(
        self, prompts: list[Prompt], chat: bool, params: SamplingParams
    ) -> Iterator[tuple[int, str]]:
        merged: queue.Queue[tuple[int, TokenEvent]] = queue.Queue()
        submitted = [
            self._start(p, chat, params, functools.partial(put_tagged, merged, i))
            for i, p in enumerate(prompts)
        ]
        try:
            for index, event in until_finished(merged, sum(n for _, n in submitted)):
                if event.text:
                    yield index, event.text
        finally:
            for request_id, _ in submitted:
                self.abort(request_id)

    async def generate_async(
        self, prompt: Prompt, chat: bool = True, **sampling: Any
    ) -> AsyncIterator[str]:
        """Text pieces of one prompt as they are generated, without blocking the loop."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[TokenEvent] = asyncio.Queue()
        params = SamplingParams.from_kwargs(**sampling)

        def sink(event: TokenEvent) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        request_id, _ = self.submit(prompt, params, sink, chat=chat)
        remaining = params.n
        try:
            while remaining:
                event = await events.get()
                raise_on_error(event)
                remaining -= event.finish_reason is not None
                if event.text:
                    yield event.text
        finally:
            self.abort(request_id)


def _is_batch(prompt: Prompt | list[Prompt]) -> TypeGuard[list[Prompt]]:
    """A list of prompts (strings or message lists), as opposed to one chat's messages."""
    return isinstance(prompt, list) and bool(prompt) and not isinstance(prompt[0], dict)
