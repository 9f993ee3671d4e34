"""Test helpers: a Scheduler without a model, fed the sampled ids a test chooses."""

from __future__ import annotations

from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
from pathlib import Path

import torch

from common.embedding import EmbedSettings
from common.sampling_params import SamplingParams
from tests.worker.stack_factory import tokenizer_for
from worker.engine.embedding_requests import EmbeddingRequests
from worker.engine.output_processor import OutputProcessor
from worker.engine.request import RequestFactory
from worker.engine.scheduler import Scheduler
from worker.engine.scheduler_config import SchedulerConfig
from worker.engine.sequence import Events, Sequence, TokenEvent
from worker.engine.step_plan import Chunk, Delivery, StepOutput, StepPlan
from worker.kv.base import KVStorage
from worker.kv.paged import PageCache
from worker.model.pooling import ModelPooling, Pooling
from worker.sampling.sampler import SampleOutput


class ScriptedSampler:
    """Samples the tokens a test scripted, in order (a drafted step's later rounds)."""

    def __init__(self) -> None:
        self.script: list[int] = []

    def sample(self, seqs: SequenceABC[Sequence]) -> SampleOutput:
        ids = [self.script.pop(0) for _ in seqs]
        return StepOutput.of_tokens(ids).sampled


@dataclass
class PlanBench:
    scheduler: Scheduler
    cache: PageCache
    requests: RequestFactory
    sampler: ScriptedSampler
    events: list[TokenEvent] = field(default_factory=list)  # every one update made, in order
    arrived: list[list[Sequence]] = field(default_factory=list)
    aborts: set[str] = field(default_factory=set)

    def submit(self, prompt: list[int], request_id: str, **sampling: object) -> list[Sequence]:
        params = SamplingParams(**{"temperature": 0, **sampling})
        choices = self.requests.build(request_id, prompt, params, self.events.append)
        self.arrived.append(choices)
        return choices

    def embed(
        self,
        inputs: list[list[int]],
        request_id: str,
        pooling: Pooling,
        normalize: bool = False,
        dimensions: int | None = None,
    ) -> list[Sequence]:
        """Embeddings of `inputs` for a model of hidden size HIDDEN that pools so."""
        intake = EmbeddingRequests(self.requests, ModelPooling(pooling, normalize), HIDDEN, "m")
        settings = EmbedSettings(dimensions)
        sequences = intake.build(request_id, inputs, settings, self.events.append)
        self.arrived.append(sequences)
        return sequences

    def schedule(self) -> StepPlan:
        delivery = Delivery(self.arrived, self.aborts, False)
        self.arrived, self.aborts = [], set()
        return self.scheduler.schedule(delivery)

    def update(self, plan: StepPlan, *token_ids: int) -> list[TokenEvent]:
        """What the plan's samples drew: `token_ids`, one per plan.samples; each prompt
        chunk's kept final-norm rows are `position_rows`."""
        sampled = StepOutput.of_tokens(list(token_ids)).sampled
        output = StepOutput(sampled, hidden=tuple(position_rows(c) for c in plan.prompt_chunks))
        events = [e for _, e in self.scheduler.update(plan, output)]
        self.events += events
        return events

    def update_drafted(self, plan: StepPlan, output: StepOutput) -> Events:
        """update, then each later round of a drafted step as EngineCore.step runs them, the
        sampler's script standing in for StepExecutor.sample_drafted."""
        events = self.scheduler.update(plan, output)
        while (rows := self.scheduler.draft_rows) is not None:
            events += self.scheduler.update_drafts(self.sampler.sample(rows.seqs))
        return events

    def step(self, *token_ids: int) -> StepPlan:
        plan = self.schedule()
        self.update(plan, *token_ids)
        return plan


def plan_bench(
    model_dir: Path,
    num_pages: int = 64,
    page_size: int = 4,
    budget: int = 512,
    idle_budget: int | None = None,
    mixed_steps: bool = True,
    speculative_tokens: int = 0,
    cache_class: type[PageCache] = PageCache,
    prefill_step_s: float = 0.0,
) -> PlanBench:
    storage = KVStorage(1, num_pages, page_size, 1, 1, torch.float32, torch.device("cpu"))
    cache = cache_class(storage, page_size, 256, True, watermark=0.0)
    tokenizer = tokenizer_for(model_dir)
    sampler = ScriptedSampler()
    config = SchedulerConfig(
        prefill_token_budget=budget,
        # Unless a test says otherwise, chunks of `budget` whether or not a stream decodes.
        idle_prefill_token_budget=idle_budget or budget,
        mixed_steps=mixed_steps,
        speculative_tokens=speculative_tokens,
        prefill_step_s=prefill_step_s,
    )
    scheduler = Scheduler(cache, OutputProcessor(tokenizer), config)
    requests = RequestFactory(tokenizer, 256)
    return PlanBench(scheduler, cache, requests, sampler)


def ids(seqs: SequenceABC[Sequence]) -> list[int]:
    return [s.seq_id for s in seqs]


HIDDEN = 4  # the hidden size of the model embeddings pretend to come from


def position_row(position: int) -> list[float]:
    """The final-norm row a test's model gives position `position`: what pools it, exactly."""
    return [float(position), 1.0, 0.0, -float(position)]


def position_rows(chunk: Chunk) -> torch.Tensor | None:
    """A chunk's kept rows (`hidden_rows`), each its position's `position_row`; None: none."""
    rows = [position_row(chunk.start + r) for r in chunk.hidden_rows]
    return torch.tensor(rows) if rows else None
