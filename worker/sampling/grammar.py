"""The grammar stage of sampling: per-row token masks that keep structured output valid.

Each constrained choice holds an llguidance matcher. Before a step's rows are sampled, the
matchers of the constrained rows fill one token bitmask, and every token outside a row's
mask gets -inf; rows without a grammar are not touched. After sampling, each matcher
consumes its row's token.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import llguidance
import numpy as np
import tokenizers
import torch

from common.sampling_params import SamplingParams
from common.structured_output import StructuredOutputError, grammar_text
from common.tool_calls import tool_call_grammar
from worker.errors import RequestError


class CallProgress(Protocol):
    """How far a sequence's answer is through its tool calls (worker.text's ToolCallParser)."""

    @property
    def between_calls(self) -> bool: ...

    @property
    def num_calls(self) -> int: ...


class GrammarRow(Protocol):
    """What the grammar stage reads from one running sequence."""

    @property
    def tool_progress(self) -> CallProgress | None:
        """Its tool calls so far, where its answer may hold them."""

    @property
    def grammar(self) -> llguidance.LLMatcher | None: ...

    @property
    def max_total_tokens(self) -> int: ...

    @property
    def token_ids(self) -> Sequence[int]: ...

    @property
    def output_token_ids(self) -> Sequence[int]: ...


STRUCTURED_OUTPUT_PARAM = "structured_output"
# Tokens left in a constrained row's budget when it starts closing what it has open.
CLOSING_BUDGET = 20  # a string, a colon, a value, 4 levels and a tool call tag to close
_CLOSERS = frozenset('"}]:')


class GrammarCompiler:
    """Matchers for structured-output specs, against one tokenizer.

    The llguidance tokenizer is slow to build, so it is built on the first constrained
    request rather than at startup; compiled grammars are cached by their schema text
    (common.structured_output).
    """

    def __init__(
        self, tokenizer: tokenizers.Tokenizer, vocab_size: int, eos_token_id: int | None
    ) -> None:
        self._source = tokenizer
        self.vocab_size = vocab_size
        self._eos_token_id = eos_token_id
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()
        self.compile_seconds = 0.0

    def matcher(self, params: SamplingParams) -> llguidance.LLMatcher | None:
        """A fresh matcher at the start of the grammar `params` ask for (tool calls, or a
        structured output), or None; RequestError if it cannot be compiled."""
        if not params.calls_tools and params.structured_output is None:
            return None
        start = time.perf_counter()
        param = "tools" if params.calls_tools else STRUCTURED_OUTPUT_PARAM
        try:
            if params.calls_tools:
                grammar = tool_call_grammar(
                    params.tools,
                    params.tool_choice,
                    params.parallel_tool_calls,
                    params.structured_output,
                )
            else:
                grammar = grammar_text(params.structured_output or {})
        except StructuredOutputError as exc:
            raise RequestError(f"{param}: {exc}", param) from None
        matcher = llguidance.LLMatcher(self._llg_tokenizer(), grammar, log_level=0)
        if matcher.is_error():
            raise RequestError(f"{param}: {matcher.get_error()}", param)
        self.compile_seconds += time.perf_counter() - start
        return matcher

    def _llg_tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._tokenizer is None:
                # llguidance reads the tokenizer as tokenizer.json writes it.
                self._tokenizer = llguidance.LLTokenizer(
                    self._source.to_str(), n_vocab=self.vocab_size, eos_token=self._eos_token_id
                )
            return self._tokenizer


class GrammarMasks:
    """Applies the constrained rows' masks to a step's logits; times the work it does.

    A constrained row close to the end of its token budget may only close what it has
    open: its mask is cut to the tokens made of `"`, `}`, `]` and `:` (and `null` where a
    value is due), so it finishes as a whole object instead of being cut mid-string. Inside
    a string only those holding a `"` count (the others would be text), outside only those
    without one (it would open a string). No comma and no
    opening bracket gets through, so every such token brings the end closer; with the
    nesting bounded (common.structured_output) a `json_object` always ends within the
    budget. Under a schema the grammar may still demand more (its required keys, forced
    token by token), so there this is a best effort that flat schemas meet.
    """

    def __init__(
        self, decode: Callable[[list[int]], str] | None = None, eos_token_ids: Iterable[int] = ()
    ) -> None:
        self._decode = decode
        self._eos_token_ids = list(eos_token_ids)
        self._closing: torch.Tensor | None = None
        self.mask_seconds = 0.0
        self.masked_rows = 0

    def apply(self, logits: torch.Tensor, seqs: Sequence[GrammarRow]) -> None:
        """-inf in `logits` (B, V) for every token row i's grammar forbids; rows without a
        grammar untouched."""
        matchers = [(i, seq.grammar) for i, seq in enumerate(seqs) if seq.grammar is not None]
        if not matchers:
            return
        start = time.perf_counter()
        rows = [i for i, _ in matchers]
        vocab = logits.shape[1]
        bitmask = torch.full((len(rows), (vocab + 31) // 32), -1, dtype=torch.int32)
        # On this thread, one row after the other: llguidance's parallel executor was slower
        # here, its threads competing with the forward's OpenMP threads still spinning.
        # The matcher's own call that llguidance.torch.fill_next_token_bitmask makes: that
        # module compiles a kernel with torch.compile when imported, which pulled torch's
        # dynamo and inductor into every worker's start (most of its import time).
        row_bytes = bitmask.shape[1] * bitmask.element_size()
        for k, (_, matcher) in enumerate(matchers):
            matcher.unsafe_compute_mask_ptr(bitmask.data_ptr() + k * row_bytes, row_bytes)
        # Unpacked by numpy: its unpackbits and one in-place fill cost a fraction of torch's
        # shift-and-mask over (rows, V / 32, 32) (docs/BENCHMARKS.md).
        words = (~bitmask).numpy().view(np.uint8)
        unpacked = np.unpackbits(words, axis=1, bitorder="little")[:, :vocab]
        banned = torch.from_numpy(np.ascontiguousarray(unpacked)).view(torch.bool)  # (G, V)
        for k, row in enumerate(rows):
            narrowed = self._narrowed(seqs[row], banned[k], vocab)
            if narrowed is not None:
                banned[k] = ~narrowed
        if len(rows) == logits.shape[0]:
            logits.masked_fill_(banned, float("-inf"))
        else:
            for k, row in enumerate(rows):
                logits[row].masked_fill_(banned[k], float("-inf"))
        self.mask_seconds += time.perf_counter() - start
        self.masked_rows += len(rows)

    def _narrowed(self, seq: GrammarRow, banned: torch.Tensor, vocab: int) -> torch.Tensor | None:
        """The tokens a row near the end of its budget may take, when fewer than the grammar
        allows (`banned`: what it forbids); None when the grammar's choice stands."""
        left = seq.max_total_tokens - len(seq.token_ids)
        no_room = _no_room_for_another_call(seq, left)
        if not no_room and left > CLOSING_BUDGET:
            return None
        allowed = ~banned
        if no_room:
            ends = allowed & self._tokens(vocab)[4]
            if ends.any():
                return ends
        if left > CLOSING_BUDGET:
            return None
        decode = self._decode
        in_string = _inside_string(decode(list(seq.output_token_ids))) if decode else False
        tokens = self._tokens(vocab)
        # Closers; else (before the first brace) an empty container, or a bare opener if there
        # is room to close it; else the grammar's own choice (a forced key, a digit, the
        # middle of a literal).
        openers = tokens[2] | tokens[3] if left >= 2 else tokens[2]
        for choice in (tokens[int(in_string)], openers):
            narrowed = allowed & choice
            if narrowed.any():
                return narrowed
        return None

    def _tokens(self, vocab: int) -> torch.Tensor:
        """(5, V): the closing tokens for outside a string (no quote: a quote there would
        open a new one), for inside one (a quote in them), `{}` and `[]`, `{` and `[`, and the
        end-of-sequence tokens."""
        if self._closing is None:
            closing = torch.zeros(5, vocab, dtype=torch.bool)
            if self._decode is not None:
                for token_id in range(vocab):
                    text = self._decode([token_id])
                    if text == "null" or (text and set(text) <= _CLOSERS):
                        closing[int('"' in text), token_id] = True
                    closing[2, token_id] = text in ("{}", "[]")
                    closing[3, token_id] = text in ("{", "[")
                eos = [t for t in self._eos_token_ids if t < vocab]
                closing[0, eos] = True  # where the grammar may end, end
                closing[4, eos] = True
            self._closing = closing
        return self._closing


def _no_room_for_another_call(seq: GrammarRow, left: int) -> bool:
    """Between tool calls, with fewer tokens left than twice what a call has taken so far:
    a call begun now would be cut off, so the answer ends here."""
    parser = seq.tool_progress
    if parser is None or not parser.between_calls:
        return False
    return bool(left < 2 * (len(seq.output_token_ids) / parser.num_calls))


def _inside_string(text: str) -> bool:
    """Whether JSON text ends inside a string (its quotes counted, escaped ones not)."""
    inside = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and inside:
            escaped = True
        elif char == '"':
            inside = not inside
    return inside


class GrammarViolation(RuntimeError):
    """A sampled token the grammar refuses: its choice ends in an error, the batch goes on."""


def grammar_finished(matcher: llguidance.LLMatcher, token_id: int) -> bool:
    """Feed the sampled token; True once the grammar is complete (nothing may follow).

    The mask only ever lets through tokens the matcher accepts, so a refusal here is a bug:
    it raises GrammarViolation rather than letting the output leave the grammar silently.
    """
    if not matcher.consume_token(token_id):
        raise GrammarViolation(f"token {token_id} is outside the grammar: {matcher.get_error()}")
    return matcher.is_stopped()
