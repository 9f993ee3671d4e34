"""TokenSampler: each row's next token, with the bans its sequence's state imposes first."""

from __future__ import annotations

from collections.abc import Sequence as SequenceABC

import torch

from worker.engine.sequence import Sequence
from worker.sampling.grammar import GrammarMasks
from worker.sampling.sampler import SampleOutput, sample_rows
from worker.text.tokenizer import Tokenizer


class TokenSampler:
    """min_tokens bans, grammar masks, then the sampling pipeline; `logits` row i is seqs[i].

    It reads the sequences (their settings, outputs so far, grammar matchers) and changes
    none of them: appending the token is Scheduler.update's.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.eos_token_ids = tuple(tokenizer.eos_token_ids)
        self.grammar_masks = GrammarMasks(
            lambda ids: tokenizer.decode(ids, skip_special_tokens=False), tokenizer.eos_token_ids
        )

    def sample(self, seqs: SequenceABC[Sequence], logits: torch.Tensor) -> SampleOutput:
        if not seqs:
            return SampleOutput([], [], [])
        self.forbid_early_stops(seqs, logits)
        self.grammar_masks.apply(logits, seqs)
        return sample_rows(logits, seqs)

    def forbid_early_stops(self, seqs: SequenceABC[Sequence], logits: torch.Tensor) -> None:
        """Rows below min_tokens may not sample a stop token."""
        for row, seq in enumerate(seqs):
            params = seq.params
            # A grammar decides alone when its output is complete.
            if seq.num_output_tokens < params.min_tokens and seq.grammar is None:
                eos = () if params.ignore_eos else self.eos_token_ids
                banned = set(params.stop_token_ids) | set(eos)
                if banned:
                    logits[row, sorted(banned)] = float("-inf")
