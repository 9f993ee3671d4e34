"""The gateway's requests as engine calls: Submit → Accepted (or Rejected), Tokenize → Tokenized."""

from __future__ import annotations

import logging
from typing import Any

from common.errors import RejectCode
from common.schemas import Accepted, Message, Rejected, Submit, Tokenize, Tokenized, Tokens
from worker.engine.inference_engine import InferenceEngine
from worker.engine.sequence import EventSink
from worker.errors import RequestError

log = logging.getLogger(__name__)
INTERNAL = "the worker failed to take this request (see the worker's log)"


def submit(engine: InferenceEngine, message: Submit, sink: EventSink) -> list[Message]:
    """Queue the request; its answers, sent before any of its tokens can be: Accepted (or
    Rejected), then with `echo` one Tokens per choice holding its prompt's text."""
    request_id = message.request_id
    try:
        params = message.params
        if message.embed is not None:  # Submit.embed always comes with prompts, the inputs
            counts = engine.submit_embeddings(
                message.prompts or [], sink, request_id, message.embed
            )
            prompt_tokens = sum(counts)
        elif message.rerank is not None:  # its prompts are the documents, text only
            documents = [d for d in message.prompts or [] if isinstance(d, str)]
            if len(documents) != len(message.prompts or []):
                raise RequestError("documents must be text to rerank", "documents")
            prompt_tokens = sum(engine.submit_rerank(documents, message.rerank, sink, request_id))
        elif message.prompts is not None:
            prompt_ids = engine.submit_prompts(message.prompts, params, sink, request_id)
            prompt_tokens = sum(len(ids) for ids in prompt_ids)
        else:
            chat = message.messages is not None
            prompt: Any = message.messages if chat else message.prompt
            _, prompt_tokens = engine.submit(prompt, params, sink, request_id, chat)
    except (TypeError, ValueError) as exc:
        return [_refusal(request_id, exc)]
    except Exception:  # a bug, or a chat template that cannot take it: this request fails alone
        log.exception("request %s could not be queued", request_id)
        return [Rejected(request_id, RejectCode.INTERNAL, INTERNAL)]
    replies: list[Message] = [Accepted(request_id, prompt_tokens)]
    if message.echo and message.prompts is not None:
        for p, (prompt, ids) in enumerate(zip(message.prompts, prompt_ids, strict=True)):
            # Text is echoed as given; token ids as the text they spell.
            text = prompt if isinstance(prompt, str) else engine.detokenize(ids)
            replies += [Tokens(request_id, p * params.n + i, text, []) for i in range(params.n)]
    return replies


def tokenize(engine: InferenceEngine, message: Tokenize) -> Tokenized | Rejected:
    """Token ids of a prompt or chat as a request with its params would see them, or the
    text of the ids given."""
    try:
        if message.token_ids is not None:
            text = engine.detokenize(message.token_ids)
            return Tokenized(message.request_id, message.token_ids, text)
        params = message.params
        chat = message.messages is not None
        prompt: Any = message.messages if chat else message.prompt
        ids = engine.tokenize(prompt, params, chat=chat)
    except (TypeError, ValueError) as exc:
        return _refusal(message.request_id, exc)
    except Exception:
        log.exception("request %s could not be tokenized", message.request_id)
        return Rejected(message.request_id, RejectCode.INTERNAL, INTERNAL)
    return Tokenized(message.request_id, ids, max_context=engine.max_model_len)


def _refusal(request_id: str, exc: TypeError | ValueError) -> Rejected:
    """A RequestError keeps its code and parameter; any other bad input is invalid."""
    if isinstance(exc, RequestError):
        return Rejected(request_id, exc.code, str(exc), exc.param)
    return Rejected(request_id, RejectCode.INVALID_REQUEST, str(exc))
