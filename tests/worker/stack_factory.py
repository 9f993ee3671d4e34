"""Test helpers: a scheduler over a tiny random-weight model and the real default tokenizer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from common.sampling_params import SamplingParams
from worker.engine.engine_core import EngineCore
from worker.engine.output_processor import OutputProcessor
from worker.engine.request import RequestFactory
from worker.engine.runner import ModelRunner
from worker.engine.scheduler_config import SchedulerConfig
from worker.engine.sequence import TokenEvent
from worker.kv.base import KVStorage
from worker.kv.paged import PageCache
from worker.model.config import ModelConfig
from worker.model.llama import LlamaModel
from worker.text.tokenizer import Tokenizer

TINY = ModelConfig(
    model_type="llama",
    vocab_size=49152,  # the default tokenizer's vocabulary
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    eos_token_ids=(2,),
)

_TOKENIZERS: dict[Path, Tokenizer] = {}


def tiny_model(seed: int = 0) -> LlamaModel:
    torch.manual_seed(seed)
    model = LlamaModel(TINY).eval()
    with torch.no_grad():  # larger logits make greedy choices clear-cut, never near ties
        model.lm_head.weight.mul_(8)
    return model


def tokenizer_for(model_dir: Path) -> Tokenizer:
    if model_dir not in _TOKENIZERS:
        _TOKENIZERS[model_dir] = Tokenizer(model_dir)
    return _TOKENIZERS[model_dir]


@dataclass
class Collector:
    """Sink that records every event, by request id."""

    events: dict[str, list[TokenEvent]] = field(default_factory=dict)

    def __call__(self, event: TokenEvent) -> None:
        self.events.setdefault(event.request_id, []).append(event)

    def text(self, request_id: str, index: int = 0) -> str:
        return "".join(e.text for e in self.events.get(request_id, []) if e.index == index)

    def token_ids(self, request_id: str, index: int = 0) -> list[int]:
        return [t for e in self.events.get(request_id, []) if e.index == index for t in e.token_ids]

    def finished(self, request_id: str) -> list[TokenEvent]:
        return [e for e in self.events.get(request_id, []) if e.finish_reason is not None]


@dataclass
class Stack:
    scheduler: EngineCore
    cache: PageCache
    requests: RequestFactory
    collector: Collector

    def submit(self, prompt_ids: list[int], request_id: str, **sampling: object) -> None:
        params = SamplingParams.from_kwargs(**{"temperature": 0, **sampling})
        self.scheduler.add(self.requests.build(request_id, prompt_ids, params, self.collector))

    def run(self, max_steps: int = 2000) -> int:
        """Step until idle; returns the number of steps taken."""
        for step in range(max_steps):
            if not self.scheduler.has_work():
                return step
            self.scheduler.step()
        raise AssertionError(f"still busy after {max_steps} steps")


def tiny_stack(
    model_dir: Path,
    num_pages: int = 64,
    page_size: int = 4,
    max_seqs: int = 8,
    budget: int = 512,
    prefix_caching: bool = True,
    model: LlamaModel | None = None,
    mixed_steps: bool = True,
    prefill_step_s: float = 0.0,
) -> Stack:
    model = model or tiny_model()
    storage = KVStorage(
        TINY.num_layers,
        num_pages,
        page_size,
        TINY.num_kv_heads,
        TINY.head_dim,
        torch.float32,
        torch.device("cpu"),
    )
    cache = PageCache(
        storage, page_size, TINY.max_position_embeddings, prefix_caching, watermark=0.0
    )
    tokenizer = tokenizer_for(model_dir)
    scheduler = EngineCore(
        ModelRunner(model, cache),
        cache,
        OutputProcessor(tokenizer),
        SchedulerConfig(
            max_seqs=max_seqs,
            prefill_token_budget=budget,
            idle_prefill_token_budget=budget,
            mixed_steps=mixed_steps,
            prefill_step_s=prefill_step_s,
        ),
    )
    requests = RequestFactory(
        tokenizer, min(TINY.max_position_embeddings, cache.max_tokens_per_seq)
    )
    return Stack(scheduler, cache, requests, Collector())
