"""RequestLifecycle: one API request from admission to release, owned by one object."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import TypeVar

from common.errors import RejectCode
from common.schemas import Abort, Accepted, Finished, Message, Rejected, Submit, Tokens
from gateway.errors import ErrorKind, GatewayError
from gateway.kv_routing import pick_worker
from gateway.messages import finish_error, rejection_error
from gateway.protocols.base import ChatRequest, ResponseBuilder, StreamState
from gateway.registry import WorkerState
from gateway.request_events import ChoiceEnd, Failed, RequestEvent, Restarted, TokenDelta
from gateway.services import RequestServices
from gateway.workers import RequestChannel, WorkerLost

log = logging.getLogger(__name__)
T = TypeVar("T")

# How often a request waiting for a live worker looks again (bounded by its queue timeout).
WORKER_POLL_S = 0.1


async def wait_for_workers(found: Callable[[], list[T]], deadline: float) -> list[T]:
    """`found()` once it is not empty, else (at `deadline`, monotonic) its last, empty value:
    what a request waits on while no worker can take it."""
    while not (result := found()) and (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(WORKER_POLL_S, left))
    return result


class RequestLifecycle:
    """Owns one request: its admission slot, its worker and channel, its events, its first
    token, its abort and its release.

    admit → start (a worker accepts) → events → release. Both kinds of answer read the same
    `events()`: a stream renders each one as SSE (gateway/streaming.py), a non-streamed
    answer folds them into one result (gateway/response_fold.py). A worker lost before the
    client has seen any of its answer is replaced by another one, once per worker, inside
    `events()`: a non-streamed answer may start over at any point (it is only sent at the
    end; the fold is told by `Restarted`), a stream only before its first token. `release`
    runs once on every path out (an answer, an error, the client gone, the gateway's cut)
    and gives back all that was taken: a request its worker may still be running is aborted
    there, the channel is closed, the slot passed on, and the request counted in the metrics.
    """

    def __init__(
        self, services: RequestServices, builder: ResponseBuilder, started_at: float
    ) -> None:
        self.services = services
        self.protocol = builder.name
        self.request_id = f"{builder.id_prefix}{uuid.uuid4().hex}"
        self.started_at = started_at  # the request's arrival: latency and TTFT count from it
        self.ttft_s: float | None = None
        self.state: StreamState | None = None  # set once a worker accepted
        self._worker: WorkerState | None = None
        self._channel: RequestChannel | None = None
        self._admitted = False
        self._worker_done = False  # nothing of it can still run on the worker
        self._released = False
        self._chat: ChatRequest | None = None
        self._model = ""
        # (worker, incarnation) this request was submitted to: a restart is a new worker
        self._tried: set[tuple[str, str]] = set()

    async def admit(self) -> None:
        """Take an admission slot (or raise the rate-limit error)."""
        await self.services.admission.acquire()
        self._admitted = True

    # -- starting -------------------------------------------------------------------------------
    async def start(self, chat: ChatRequest, model: str) -> StreamState:
        """Submit to a worker and wait for it to accept or reject, before any HTTP status.

        A worker lost before it accepted is replaced by another one (retried once).
        """
        self._chat, self._model = chat, model
        reply = await self._submit(chat.submit(self.request_id))
        self.state = StreamState(
            request_id=self.request_id,
            model=model,
            created=int(time.time()),
            request=chat,
            prompt_tokens=reply.prompt_tokens,
        )
        return self.state

    async def _submit(self, submit: Submit) -> Accepted:
        """To workers not tried yet, until one accepts (it is then this request's worker).

        While no untried worker is live (the only one restarting, or every one tried), the
        request waits for one, a restarted worker counting as new, until its queue timeout
        from arrival has passed: a worker's restart costs a pause, not a 503.
        """
        services, model, chat = self.services, self._model, self._chat
        assert chat is not None
        deadline = self.started_at + services.config.queue_timeout_s
        attempts = 0
        while attempts < services.config.submit_attempts:
            candidates = await wait_for_workers(self._untried(model), deadline)
            if not candidates:
                break
            worker = await pick_worker(services, candidates, chat)
            if self._tried:
                services.metrics.retries += 1
            attempts += 1
            self._tried.add((worker.worker_id, worker.incarnation))
            channel = services.hub.open(self.request_id, worker)
            try:
                reply = await self._first_reply(worker, channel, submit)
            except BaseException:
                # The client left while we waited, or the submit failed: nothing stays open
                # here, and nothing runs on for nobody there.
                services.hub.close(channel)
                self._send_abort_soon(worker)
                raise
            if isinstance(reply, Accepted):
                self._worker, self._channel = worker, channel
                self._worker_done = False
                return reply
            services.hub.close(channel)
            if isinstance(reply, Rejected) and reply.code != RejectCode.DRAINING:
                raise rejection_error(reply)
        raise GatewayError(ErrorKind.UNAVAILABLE, f"no worker of model {model!r} could take it")

    def _untried(self, model: str) -> Callable[[], list[WorkerState]]:
        registry, tried = self.services.registry, self._tried
        return lambda: [
            w for w in registry.live(model) if (w.worker_id, w.incarnation) not in tried
        ]

    async def _resubmit(self) -> GatewayError | None:
        """After this request's worker was lost: the request again, from its start, to a
        worker not tried yet. None once one accepted, else the error to end with."""
        state, chat = self.state, self._chat
        assert state is not None and chat is not None
        if self._channel is not None:
            self.services.hub.close(self._channel)
        self._channel = self._worker = None
        try:
            reply = await self._submit(chat.submit(self.request_id))
        except GatewayError as error:
            return error
        state.prompt_tokens = reply.prompt_tokens
        state.completion_tokens = state.cached_tokens = state.cache_written_tokens = 0
        return None

    async def _first_reply(
        self, worker: WorkerState, channel: RequestChannel, submit: Submit
    ) -> Message | WorkerLost:
        hub = self.services.hub
        if not await hub.send(worker, submit):
            return WorkerLost(worker.worker_id, "unreachable")
        try:
            while True:
                reply = await channel.get(self.services.config.accept_timeout_s)
                if isinstance(reply, (Accepted, Rejected, WorkerLost)):
                    return reply
        except TimeoutError:
            await hub.send(worker, Abort(submit.request_id))
            return WorkerLost(worker.worker_id, "no answer to submit")

    # -- events ---------------------------------------------------------------------------------
    async def events(self) -> AsyncGenerator[RequestEvent, None]:
        """The worker's messages as events, until every choice has ended or the request has
        failed (`Failed` is then the last event). Counts the stream's usage in `state` and
        records the time to first token, once, for both kinds of answer."""
        state, channel = self._accepted()
        n = state.request.num_choices
        remaining = n
        delivered = False  # an event of this answer has been yielded
        while remaining:
            message = await channel.get()
            if isinstance(message, WorkerLost):
                # Its worker is gone, or the gateway's cut has aborted it already.
                self._worker_done = True
                failure = GatewayError(ErrorKind.UNAVAILABLE, message.detail)
                if not message.shutting_down and not (delivered and state.request.stream):
                    log.warning(
                        "request %s lost %s; submitting it again",
                        self.request_id,
                        message.worker_id,
                    )
                    refused = await self._resubmit()
                    if refused is None:
                        if delivered:
                            yield Restarted()
                        state, channel = self._accepted()
                        remaining, delivered = n, False
                        continue
                    failure = GatewayError(ErrorKind.UNAVAILABLE, f"{message.detail}; {refused}")
                yield Failed(failure, 503)
                return
            if isinstance(message, Tokens) and 0 <= message.index < n:
                if self.ttft_s is None and message.token_ids:  # an echoed prompt is no token
                    self.ttft_s = time.monotonic() - self.started_at
                state.completion_tokens += len(message.token_ids)
                logprobs, parts = message.logprobs or [], message.tool_calls or []
                prompt_logprobs = message.prompt_logprobs
                if prompt_logprobs is not None and state.request.echo:
                    # An echoed prompt's tokens are part of the text: theirs lead the logprobs.
                    logprobs = [*prompt_logprobs, *logprobs]
                delivered = True
                yield TokenDelta(
                    message.index, message.text, logprobs, parts, prompt_logprobs, message.reasoning
                )
            elif isinstance(message, Finished) and 0 <= message.index < n:
                remaining -= 1
                self._worker_done = remaining == 0
                ended_badly = finish_error(message)
                if ended_badly is not None:
                    yield Failed(ended_badly, 500)
                    return
                if message.index % state.request.n == 0:  # once per prompt: its first choice
                    state.cached_tokens += message.cached_tokens
                    state.cache_written_tokens += message.cache_written_tokens
                delivered = True
                yield ChoiceEnd(
                    message.index,
                    message.finish_reason,
                    message.stop,
                    message.completion_tokens,
                    message.embedding,
                    message.score,
                )

    def _accepted(self) -> tuple[StreamState, RequestChannel]:
        if self.state is None or self._channel is None:
            raise RuntimeError("events() before a worker accepted the request")
        return self.state, self._channel

    # -- the end --------------------------------------------------------------------------------
    def release(self, status: int, output_tokens: int | None) -> None:
        """Give back all the request took, and count it as `status`; only the first call acts.

        `output_tokens`: what the answer carried. None for an answer that carried no
        generation (an error body, or nothing: the client left before a non-streamed
        answer), counted as a refusal is, without latency or time to first token.
        """
        if self._released:
            return
        self._free()
        if output_tokens is None:
            self.services.metrics.observe(self.protocol, status, 0.0, None, 0)
            return
        latency = time.monotonic() - self.started_at
        self.services.metrics.observe(self.protocol, status, latency, self.ttft_s, output_tokens)

    def discard(self) -> None:
        """Give back all the request took without counting it: an unexpected exception is on
        its way to the route, which answers and counts it."""
        if not self._released:
            self._free()

    def _free(self) -> None:
        self._released = True
        if self._channel is not None:
            if not self._worker_done:  # the client left, or a failure left choices running
                self._send_abort_soon(self._worker)
            self.services.hub.close(self._channel)
        if self._admitted:
            self.services.admission.release()

    def _send_abort_soon(self, worker: WorkerState | None) -> None:
        """Tell the worker to stop, without awaiting (we may be inside a cancellation)."""
        if worker is None:
            return
        task = asyncio.ensure_future(self.services.hub.send(worker, Abort(self.request_id)))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
