"""Request intake: validate a prompt and its settings, tokenize it, build its choices."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Iterable, Mapping
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass
from typing import Any, cast

import torch

from common.chat import normalize_messages
from common.sampling_params import SamplingParams
from worker.engine.sequence import EventSink, OutputReaders, Sequence
from worker.errors import ContextLengthExceeded, RequestError
from worker.sampling.grammar import GrammarCompiler
from worker.text.reasoning_format import closing_suffix, reasoning_parser, template_kwargs
from worker.text.stop_strings import StopStringMatcher
from worker.text.tokenizer import Tokenizer
from worker.text.tool_parser import ToolCallParser
from worker.text.turn_truncation import fit_turns

Message = Mapping[str, Any]
PROMPT_TAIL_TOKENS = 32  # the end of a prompt read for an opened reasoning tag
Prompt = str | SequenceABC[Message]


@dataclass(frozen=True, init=False)
class GenerationRequest:
    """The AstrAI GenerationRequest: chat messages, their settings and whether to stream.

    Built with the seed's keywords (top_k, top_p, temperature, max_tokens) or any other
    SamplingParams field, checked here once; or given `params` already built. SamplingParams'
    defaults hold (top_k off).
    """

    messages: list[dict[str, Any]]
    params: SamplingParams
    stream: bool

    def __init__(
        self,
        messages: list[dict[str, Any]],
        stream: bool = False,
        params: SamplingParams | None = None,
        **sampling: Any,
    ) -> None:
        if params is not None and sampling:
            raise TypeError("give params or sampling keywords, not both")
        # Frozen: the fields are set the way dataclasses' own __init__ sets them.
        object.__setattr__(self, "messages", messages)
        object.__setattr__(self, "params", params or SamplingParams.from_kwargs(**sampling))
        object.__setattr__(self, "stream", stream)


class RequestFactory:
    """Turns a prompt and keyword settings into the Sequences of one request."""

    def __init__(
        self, tokenizer: Tokenizer, max_model_len: int, vocab_size: int | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.grammars = GrammarCompiler(
            tokenizer.backend, vocab_size or tokenizer.vocab_size, tokenizer.eos_token_id
        )
        self._seq_ids = itertools.count()
        self._request_ids = itertools.count()
        self._lock = threading.Lock()

    def new_request_id(self) -> str:
        with self._lock:
            return f"req-{next(self._request_ids)}"

    def new_seq_ids(self, count: int) -> list[int]:
        """Ids for `count` new sequences, unique in this engine (any thread)."""
        with self._lock:
            return [next(self._seq_ids) for _ in range(count)]

    def prompt_token_ids(
        self, prompt: Prompt, chat: bool = True, params: SamplingParams | None = None
    ) -> list[int]:
        """A prompt's ids; a chat through the template with `params`' tools and template
        variables (reasoning off where the answer is constrained: reasoning_format.py),
        without its oldest turns where they do not fit and `drop_oldest_turns` says so."""
        params = params or SamplingParams()
        if params.drop_oldest_turns and not isinstance(prompt, str):
            budget = self.max_model_len - (params.max_tokens or 1)
            render = lambda kept: self._rendered(kept, chat, params)  # noqa: E731
            return fit_turns(prompt, render, lambda ids: len(ids) <= budget)
        return self._rendered(prompt, chat, params)

    def _rendered(self, prompt: Prompt, chat: bool, params: SamplingParams) -> list[int]:
        ids = self._prompt_ids(prompt, chat, params)
        tags = self.tokenizer.reasoning_tags
        if tags is not None and params.is_constrained and self.is_templated(prompt, chat):
            suffix = closing_suffix(self._prompt_tail(ids), tags, params)
            ids += self.tokenizer.encode(suffix, add_special_tokens=False) if suffix else []
        return ids

    def is_templated(self, prompt: Prompt, chat: bool) -> bool:
        """The prompt goes through the chat template (its answer may hold reasoning)."""
        return not isinstance(prompt, str) or (chat and self.tokenizer.has_chat_template)

    def _prompt_tail(self, prompt_ids: list[int]) -> str:
        return self.tokenizer.decode(prompt_ids[-PROMPT_TAIL_TOKENS:], skip_special_tokens=False)

    def _prompt_ids(self, prompt: Prompt, chat: bool, params: SamplingParams) -> list[int]:
        tools, continue_final = params.tools, params.continue_final_message
        kwargs = template_kwargs(params, self.tokenizer.reasoning_tags)
        if isinstance(prompt, str):
            if not prompt:
                raise RequestError("prompt must not be empty", "prompt")
            try:  # a lone surrogate ("\ud800") cannot be encoded, so cannot be tokenized
                prompt.encode("utf-8")
            except UnicodeEncodeError:
                message = "prompt must be valid Unicode text: it holds a lone surrogate"
                raise RequestError(message, "prompt") from None
            if chat and self.tokenizer.has_chat_template:
                user = [{"role": "user", "content": prompt}]
                return self.tokenizer.encode_chat(user, tools, template_kwargs=kwargs)
            return self.tokenizer.encode(prompt)
        if isinstance(prompt, SequenceABC):
            messages = cast(SequenceABC[Message], prompt)  # mypy keeps str in the union here
            chat_messages = normalize_messages(messages)
            return self.tokenizer.encode_chat(chat_messages, tools, continue_final, kwargs)
        raise RequestError(
            f"prompt must be a string or a list of messages, got {type(prompt).__name__}",
            "prompt",
        )

    def raw_prompt_ids(self, prompts: SequenceABC[str | SequenceABC[int]]) -> list[list[int]]:
        """Token ids of raw prompts (no chat template): text is tokenized, token ids are
        checked against the vocabulary and used as they are."""
        if not prompts:
            raise RequestError("prompt must not be empty", "prompt")
        ids: list[list[int]] = []
        for p, prompt in enumerate(prompts):
            if isinstance(prompt, str):
                ids.append(self.prompt_token_ids(prompt, chat=False))
                continue
            if not prompt:
                raise RequestError(f"prompt[{p}] must not be empty", "prompt")
            self.check_in_vocab(prompt, f"prompt[{p}]", "prompt")
            ids.append(list(prompt))
        return ids

    def check_in_vocab(self, token_ids: Iterable[int], where: str, param: str) -> None:
        """RequestError unless every id is a row of the model's embedding."""
        vocab = self.grammars.vocab_size
        bad = next((t for t in token_ids if not isinstance(t, int) or not 0 <= t < vocab), None)
        if bad is not None:
            message = f"{where}: token id {bad} is outside the vocabulary (0..{vocab - 1})"
            raise RequestError(message, param)

    def check_length(
        self, num_prompt_tokens: int, params: SamplingParams, prompt_param: str = "messages"
    ) -> int:
        """The most tokens prompt + output may reach; ContextLengthExceeded if it cannot fit
        (unless `clamp_max_tokens` cuts max_tokens to what the context leaves)."""
        limit = self.max_model_len
        if num_prompt_tokens >= limit:
            raise ContextLengthExceeded(
                f"prompt is too long: {num_prompt_tokens} tokens > {limit - 1} maximum "
                f"(the context holds {limit}, including at least one new token)",
                prompt_param,
            )
        if params.max_tokens is None:
            return limit
        if params.clamp_max_tokens:
            return min(limit, num_prompt_tokens + params.max_tokens)
        if num_prompt_tokens + params.max_tokens > limit:
            raise ContextLengthExceeded(
                f"max_tokens {params.max_tokens} + prompt {num_prompt_tokens} tokens "
                f"exceeds the context of {limit}",
                "max_tokens",
            )
        return num_prompt_tokens + params.max_tokens

    def build(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        sink: EventSink,
        first_index: int = 0,
        prompt_param: str = "messages",
        chat: bool = True,
    ) -> list[Sequence]:
        """The n choices of one prompt, numbered from `first_index`; a chat's answers are
        read for reasoning where the model reasons."""
        max_total = self.check_length(len(prompt_ids), params, prompt_param)
        self.check_in_vocab((token for token, _ in params.logit_bias), "logit_bias", "logit_bias")
        # A stop id past the vocabulary would index past the logits (the min_tokens ban).
        self.check_in_vocab(params.stop_token_ids, "stop_token_ids", "stop_token_ids")
        # One matcher per choice; the grammar is compiled once (and cached across requests).
        matchers = [self.grammars.matcher(params) for _ in range(params.n)]
        seq_ids = self.new_seq_ids(params.n)
        tags = self.tokenizer.reasoning_tags if chat else None
        tail = self._prompt_tail(prompt_ids) if tags is not None else ""
        return [
            Sequence(
                seq_id=seq_id,
                request_id=request_id,
                index=first_index + index,
                token_ids=list(prompt_ids),
                num_prompt_tokens=len(prompt_ids),
                params=params,
                sink=sink,
                # Seeded by the index within its prompt: a prompt samples alike in any batch.
                generator=_generator(params, index),
                output=OutputReaders(
                    self.tokenizer.detokenizer(prompt_ids, params.skip_special_tokens),
                    StopStringMatcher(params.stop),
                    reasoning_parser(tags, params, tail),
                    ToolCallParser() if params.calls_tools else None,
                ),
                max_total_tokens=max_total,
                grammar=matchers[index],
            )
            for index, seq_id in enumerate(seq_ids)
        ]

    def build_prompts(
        self,
        request_id: str,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        sink: EventSink,
    ) -> list[Sequence]:
        """The choices of raw prompts, prompt-major: prompt p's choice i has index p * n + i."""
        return [
            seq
            for p, ids in enumerate(prompt_ids)
            for seq in self.build(request_id, ids, params, sink, p * params.n, "prompt", False)
        ]


def _generator(params: SamplingParams, index: int) -> torch.Generator | None:
    """Each choice's own randomness: seed + choice index, or a fresh random seed."""
    if params.is_greedy:
        return None
    seed = params.seed + index if params.seed is not None else random.getrandbits(63)
    return torch.Generator().manual_seed(seed)
