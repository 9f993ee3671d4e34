"""pick_worker: the routing policy's choice, with the prompt's token ids for exact KV routing."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence

from common.schemas import Tokenize, Tokenized
from gateway.protocols.base import ChatRequest
from gateway.registry import WorkerState
from gateway.router import ExactPrefix, LeastLoaded
from gateway.services import RequestServices

log = logging.getLogger(__name__)
TOKENIZE_TIMEOUT_S = 2.0  # past this, the request is routed without its token ids

# The gateway has no tokenizer and no chat template (both live in the worker), yet the
# workers' KV events name pages by hashes of token ids. So for `exact` routing a worker
# tokenizes the prompt first: one Tokenize round trip, answered on its I/O thread (as for
# /tokenize), then the policy compares each worker's pages with the prompt's. Raw
# Completions prompts given as token ids need no round trip. With one candidate there is
# nothing to choose, and when no candidate publishes events (`--kv-events-bind off`, an
# encrypted link) nothing to compare: then nothing is asked, and the prompt's text decides.


async def pick_worker(
    services: RequestServices, candidates: Sequence[WorkerState], chat: ChatRequest
) -> WorkerState:
    """The worker for this request among `candidates` (never empty)."""
    policy = services.policy
    if (
        isinstance(policy, ExactPrefix)
        and len(candidates) > 1
        and any(w.kv_events for w in candidates)
        and (token_ids := await prompt_token_ids(services, candidates, chat)) is not None
    ):
        return policy.pick_tokens(candidates, token_ids, time.monotonic())
    return policy.pick(candidates, chat.routing_text)


async def prompt_token_ids(
    services: RequestServices, candidates: Sequence[WorkerState], chat: ChatRequest
) -> list[int] | None:
    """The prompt's token ids as a worker would compute them (the first prompt's, for
    several raw prompts); None when no worker answered them in time or it refused the
    prompt (the Submit then gets the same refusal, reported as usual)."""
    request_id = f"route-{uuid.uuid4().hex}"
    if chat.prompts is None:
        message = Tokenize(request_id, chat.params, messages=chat.messages)
    elif isinstance(first := chat.prompts[0], list):
        return first
    else:
        message = Tokenize(request_id, chat.params, prompt=first)
    worker = LeastLoaded().pick(candidates, "")
    hub = services.hub
    channel = hub.open(request_id, worker)
    try:
        if not await hub.send(worker, message):
            return None
        reply = await channel.get(TOKENIZE_TIMEOUT_S)
    except TimeoutError:
        log.warning("worker %s did not tokenize a prompt for routing in time", worker.worker_id)
        return None
    finally:
        hub.close(channel)
    return reply.token_ids if isinstance(reply, Tokenized) else None
