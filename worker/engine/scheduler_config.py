"""The scheduler's settings and the counters it keeps."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SchedulerConfig:
    max_seqs: int = 64
    # Tokens per prefill forward: a step's new prompts all get their first token at its end,
    # and running streams wait for it. 256 rather than 512: a lower mean TTFT under W2 for a
    # slightly slower lone long prompt (docs/BENCHMARKS.md).
    prefill_token_budget: int = 256
    # The same while no stream decodes: nobody waits for the step then, and a long prompt
    # alone computes faster in fewer, larger chunks (each re-reads every key before it).
    idle_prefill_token_budget: int = 1024
    # While streams decode, fewer prompt tokens than prefill_token_budget where a step would
    # last longer than this, from the steps' measured time (PrefillPace); 0: the budget always.
    prefill_step_s: float = 0.0
    idle_wait_s: float = 0.5
    speculative_tokens: int = 8  # drafted tokens per sequence and step at most; 0: none
    # Decoding sequences feed their token in a prompt chunk's forward, when there is one,
    # instead of a decode forward of their own after it (Scheduler.schedule).
    mixed_steps: bool = True

    @property
    def most_prompt_tokens(self) -> int:
        """The most prompt tokens a step feeds: the idle budget, or the other if larger."""
        return max(self.prefill_token_budget, self.idle_prefill_token_budget)

    def __post_init__(self) -> None:
        if self.max_seqs < 1:
            raise ValueError(f"max_seqs must be >= 1, got {self.max_seqs}")
        if self.prefill_token_budget < 1:
            raise ValueError(f"prefill_token_budget must be >= 1, got {self.prefill_token_budget}")
        if self.idle_prefill_token_budget < 1:
            raise ValueError(
                f"idle_prefill_token_budget must be >= 1, got {self.idle_prefill_token_budget}"
            )
        if self.prefill_step_s < 0:
            raise ValueError(f"prefill_step_s must be >= 0, got {self.prefill_step_s}")
        if self.speculative_tokens < 0:
            raise ValueError(f"speculative_tokens must be >= 0, got {self.speculative_tokens}")


@dataclass
class SchedulerCounters:
    total_tasks: int = 0  # requests accepted
    total_tokens: int = 0  # tokens generated
    prefill_tokens: int = 0  # prompt tokens computed (cache hits excluded)
    decode_steps: int = 0
    preemptions: int = 0
    finished_tasks: int = 0
    draft_tokens: int = 0  # tokens drafted and verified (speculative decoding)
    accepted_draft_tokens: int = 0  # of those, kept
    embeddings: int = 0  # inputs embedded (their tokens count in prefill_tokens)
    rerank_documents: int = 0  # documents scored (their tokens count in prefill_tokens)

    def count_pooled(self, scored: bool) -> None:
        """One prefill-only sequence ended: a reranked document (`scored`) or an embedding."""
        if scored:
            self.rerank_documents += 1
        else:
            self.embeddings += 1
