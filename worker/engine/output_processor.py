"""Per-token bookkeeping after sampling: append, stop checks, detokenize, build the event."""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch

from common.token_output import FinishReason, TokenLogprob, ToolCallDelta, TopLogprob
from worker.engine.sequence import Sequence, TokenEvent
from worker.sampling.grammar import GrammarViolation, grammar_finished
from worker.text.tokenizer import Tokenizer


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def append_token(
        self,
        seq: Sequence,
        token_id: int,
        logprob: float | None = None,
        top_logprobs: Iterable[tuple[int, float]] | None = None,
    ) -> TokenEvent:
        """Add a sampled token to `seq`; the event says whether a stop condition ended it
        (the caller finishes the sequence then)."""
        seq.token_ids.append(token_id)
        if seq.first_token_time is None:
            seq.first_token_time = time.monotonic()
        params, output = seq.params, seq.output
        text = ""
        finish: FinishReason | None = None
        stop: str | int | None = None
        error: str | None = None
        if self._is_stop_token(seq, token_id):
            finish, stop = FinishReason.STOP, token_id
        else:
            result = output.stop_matcher.feed(output.detokenizer.step(token_id))
            text = result.text
            if result.matched is not None:
                finish, stop = FinishReason.STOP, result.matched
            elif seq.grammar is not None:
                try:
                    if grammar_finished(seq.grammar, token_id):
                        finish = FinishReason.STOP  # the structured output is complete
                except GrammarViolation as exc:  # this choice fails; the others go on
                    finish, error = FinishReason.ERROR, str(exc)
        if finish is None and len(seq.token_ids) >= seq.max_total_tokens:
            finish = FinishReason.LENGTH
        if finish is not None and not isinstance(stop, str):
            # Ended by a token or by length: what was held back is real output.
            text += output.stop_matcher.feed(output.detokenizer.flush()).text
            text += output.stop_matcher.flush()
        reasoning = ""
        if output.reasoning_parser is not None:  # its answer part goes on to the tool parser
            reasoning, text = output.reasoning_parser.feed(text)
            if finish is not None:
                held_reasoning, held_text = output.reasoning_parser.flush()
                reasoning, text = reasoning + held_reasoning, text + held_text
        tool_calls: list[ToolCallDelta] = []
        if output.tool_parser is not None:
            text, tool_calls = output.tool_parser.feed(text)
            if finish is not None:
                text += output.tool_parser.flush()
                if finish == FinishReason.STOP and output.tool_parser.num_calls:
                    finish = FinishReason.TOOL_CALLS
        logprobs: tuple[TokenLogprob, ...] = ()
        if params.logprobs and logprob is not None:
            logprobs = (self.token_logprob(token_id, logprob, top_logprobs or ()),)
        prompt_logprobs = None
        if params.prompt_logprobs is not None and seq.num_output_tokens == 1:
            prompt_logprobs = tuple(seq.prompt_logprobs)
        return TokenEvent(
            request_id=seq.request_id,
            index=seq.index,
            text=text,
            token_ids=(token_id,),
            logprobs=logprobs,
            finish_reason=finish,
            stop=stop,
            usage=seq.usage() if finish is not None else None,
            tool_calls=tuple(tool_calls),
            error=error,
            prompt_logprobs=prompt_logprobs,
            reasoning=reasoning,
        )

    def _is_stop_token(self, seq: Sequence, token_id: int) -> bool:
        params = seq.params
        if seq.num_output_tokens <= params.min_tokens:
            return False
        if token_id in params.stop_token_ids:
            return True
        return not params.ignore_eos and token_id in self.tokenizer.eos_token_ids

    def record_prompt_logprobs(self, seq: Sequence, start: int, logits: torch.Tensor) -> None:
        """Logprobs of `seq`'s prompt tokens after position `start` from the logits of the
        chunk that began there (row j predicts token start + j + 1); positions already
        recorded (a recomputation after preemption) or past the prompt are left alone."""
        if not seq.prompt_logprobs:  # the first token: nothing before it predicts it
            seq.prompt_logprobs.append(self.token_logprob(seq.token_ids[0], None, ()))
        k = seq.params.prompt_logprobs or 0
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        top = torch.topk(logprobs, k, dim=-1) if k else None
        for j in range(logprobs.shape[0]):
            target = start + j + 1
            if target != len(seq.prompt_logprobs) or target >= seq.num_prompt_tokens:
                continue
            token_id = seq.token_ids[target]
            alternatives = (
                ()
                if top is None
                else zip(top.indices[j].tolist(), top.values[j].tolist(), strict=True)
            )
            value = logprobs[j, token_id]
            rank = int((logprobs[j] > value).sum()) + 1
            entry = self.token_logprob(token_id, float(value), alternatives, rank)
            seq.prompt_logprobs.append(entry)

    def token_logprob(
        self,
        token_id: int,
        logprob: float | None,
        top: Iterable[tuple[int, float]],
        rank: int | None = None,
    ) -> TokenLogprob:
        decode = self.tokenizer.decode
        return TokenLogprob(
            token_id=token_id,
            text=decode([token_id], skip_special_tokens=False),
            logprob=logprob,
            top=tuple(
                TopLogprob(tid, decode([tid], skip_special_tokens=False), lp) for tid, lp in top
            ),
            rank=rank,
        )
