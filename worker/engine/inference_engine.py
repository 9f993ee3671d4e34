"""InferenceEngine: the in-process API — load a model, submit and abort requests, report state."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from common.model_names import model_names
from common.sampling_params import SamplingParams
from common.worker_stats import WorkerStats
from worker.engine.cache_factory import build_cache
from worker.engine.compiled_decode import CompiledDecode
from worker.engine.decode_cost_cache import cached_decode_cost, model_identity
from worker.engine.embedding_api import EmbeddingAPI
from worker.engine.engine_core import EngineCore
from worker.engine.generation_api import GenerationAPI
from worker.engine.kv_identity import kv_identity
from worker.engine.machine_choices import MachineChoices
from worker.engine.options import EngineOptions
from worker.engine.output_processor import OutputProcessor
from worker.engine.pooled_requests import pooled_requests
from worker.engine.request import Prompt, RequestFactory
from worker.engine.rerank_api import RerankAPI
from worker.engine.runner import ModelRunner
from worker.engine.scheduler_config import SchedulerConfig
from worker.engine.sequence import EventSink
from worker.engine.speculation import (
    PROBE_SLOTS,
    DecodeCost,
    ServedDecodeCost,
    measure_decode_cost,
)
from worker.kv.disk_tier import NO_DISK_TIER
from worker.kv.kv_rows import KV_DTYPES, dtype_name
from worker.machine.heap import release_freed_heap
from worker.model.config import with_context
from worker.model.loader import load_config, load_model
from worker.model.model_dir import resolve_model_dir
from worker.text.chat_template import read_template_file
from worker.text.tokenizer import Tokenizer

log = logging.getLogger(__name__)


class InferenceEngine(GenerationAPI, EmbeddingAPI, RerankAPI):
    """Loads a model (the embedded default when none is given) and serves it in-process;
    `submit`, `abort`, `generate` and `generate_async` come from GenerationAPI, `embed` from
    EmbeddingAPI, `rerank` from RerankAPI."""

    def __init__(self, model: str | Path | None = None, **options: Any) -> None:
        self.options = EngineOptions(**options)
        self.model_name, self.model_aliases = model_names(
            None if model is None else str(model), self.options.served_model_name
        )
        loaded = threading.Event()
        failures: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._engine_thread,
            args=(model, loaded, failures),
            name="inference-engine",
            daemon=True,
        )
        self._thread.start()
        loaded.wait()
        if failures:
            self._thread.join()
            raise failures[0]

    def _engine_thread(
        self, model: str | Path | None, loaded: threading.Event, failures: list[BaseException]
    ) -> None:
        """Load the model, then run the scheduler loop, all on this one thread.

        Every parallel torch operation of the engine happens here. With libgomp, a second
        thread that runs OpenMP regions while another thread's team exists gets throttled
        spinning, and the engine's many small ops slow down (docs/BENCHMARKS.md, Figures
        behind the code);
        keeping loading and stepping on one thread avoids a second team.
        """
        try:
            self._load(model)
        except BaseException as exc:  # handed to the constructor, which raises it
            failures.append(exc)
            loaded.set()
            return
        loaded.set()
        self.scheduler.run()

    def _load(self, model: str | Path | None) -> None:
        opts = self.options
        if opts.num_threads is not None:
            torch.set_num_threads(opts.num_threads)
        device = torch.device(opts.device)
        self.model_dir = resolve_model_dir(model)
        config = with_context(load_config(self.model_dir), opts.max_model_len, opts.rope_scaling)
        self.config = config
        # Before the weights: reading tokenizer.json's vocabulary is a burst of allocations,
        # handed back while the process is still small, and a bad folder fails fast.
        template = read_template_file(opts.chat_template) if opts.chat_template else None
        self.tokenizer = Tokenizer(
            self.model_dir, config.eos_token_ids, opts.reasoning_parser, chat_template=template
        )
        release_freed_heap()
        choices = MachineChoices.resolve(opts, self.model_dir, config)
        self.quantization, self.dtype = choices.quantization, choices.dtype
        self.model = load_model(
            self.model_dir,
            self.dtype,
            device,
            quantization=choices.quantization,
            exact_only=choices.exact_only,
            plan=choices.plan,
            config=config,
            int8_activations=choices.int8_activations,
        )
        # Which kernels run, and why: logged once here and carried to /stats (Register).
        self.kernels = choices.describe()
        if self.model.weight_paths:
            self.kernels += f"; weights by type: {self.model.weight_paths}"
        decode = "a torch.compile graph" if opts.compile else self.model.decode_path
        self.kernels += f"; decode steps: {decode}"
        log.info("%s", self.kernels)
        context = min(config.max_position_embeddings, opts.max_model_len or 1 << 62)
        kv_dtype = self.dtype if opts.kv_cache_dtype == "auto" else KV_DTYPES[opts.kv_cache_dtype]
        rows_setup = (
            f"{choices!r}|kv {kv_dtype}|page {opts.page_size}|context {context}"
            f"|rope {opts.rope_scaling}"
        )
        self.cache = build_cache(
            opts, config, kv_dtype, device, context, lambda: kv_identity(self.model_dir, rows_setup)
        )
        storage = self.cache.storage
        log.info(
            "KV cache: %d tokens, %s, %d MiB%s",
            storage.k.shape[1] * storage.k.shape[2],
            dtype_name(kv_dtype),
            storage.bytes_reserved >> 20,
            self._disk_tier_note(),
        )
        self.max_model_len = min(context, self.cache.max_tokens_per_seq)
        self.requests = RequestFactory(self.tokenizer, self.max_model_len, config.vocab_size)
        self.embeddings, self.reranks = pooled_requests(
            self.model_dir, opts.pooling, self.requests, config.hidden_size, self.model_name, device
        )
        compiled = CompiledDecode(self.model) if opts.compile else None
        runner = ModelRunner(self.model, self.cache, compiled, choices.attention == "flex")
        if compiled is not None:
            compiled.warm_up(self.cache, device, runner.with_attention_plan)
        self.scheduler = EngineCore(
            runner,
            self.cache,
            OutputProcessor(self.tokenizer),
            SchedulerConfig(
                max_seqs=opts.max_seqs,
                prefill_token_budget=opts.prefill_token_budget,
                idle_prefill_token_budget=opts.idle_prefill_token_budget,
                prefill_step_s=opts.prefill_step_ms / 1000,
                speculative_tokens=opts.speculative_tokens,
            ),
        )
        log.info("%s", prefill_note(opts))
        if opts.speculative_tokens:
            setup = f"{choices!r}|compile {opts.compile}|kv {kv_dtype}|{torch.get_num_threads()}"
            probe, measured = cached_decode_cost(
                f"{model_identity(self.model_dir)}|{setup}",
                lambda: self._measure_decode_cost(runner, device),
            )
            if not measured:
                log.info("decode-cost table of this model and machine: from the cache")
            self.scheduler.drafter.cost = ServedDecodeCost(probe)
        release_freed_heap()  # what the load built and dropped is not the worker's to hold

    def _disk_tier_note(self) -> str:
        disk = self.cache.disk
        if disk is None:
            return "; no disk tier"
        return f"; disk tier {disk.dir} ({self.options.kv_disk_mb} MiB for the folder)"

    def _measure_decode_cost(self, runner: ModelRunner, device: torch.device) -> DecodeCost:
        cost = measure_decode_cost(runner.forward_batch, device)
        # The probe wrote k/v into rows no sequence owns yet; leave them as they were.
        self.cache.storage.clear_slots(PROBE_SLOTS)
        log.info(
            "decode step by rows fed (drafted tokens are fed where that pays): %s",
            ", ".join(
                f"{rows}: {1e3 * seconds:.1f} ms"
                for rows, seconds in zip(cost.rows, cost.seconds, strict=True)
            ),
        )
        return cost

    # -- submitting (submit and abort: GenerationAPI's) -------------------------------------
    def tokenize(self, prompt: Prompt, params: SamplingParams, chat: bool = True) -> list[int]:
        """The prompt token ids a request with `params` would get (its tools rendered too)."""
        return self.requests.prompt_token_ids(prompt, chat, params)

    def detokenize(self, token_ids: list[int]) -> str:
        self.requests.check_in_vocab(token_ids, "tokens", "tokens")
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def submit_prompts(
        self,
        prompts: list[str | list[int]],
        params: SamplingParams,
        sink: EventSink,
        request_id: str,
    ) -> list[list[int]]:
        """Queue raw prompts (no chat template; text, or token ids used as they are) as one
        request of n choices each, numbered prompt-major (prompt p's choice i is p * n + i).

        Returns each prompt's token ids. Raises RequestError for bad input, with nothing
        queued: every prompt is checked before any is.
        """
        prompt_ids = self.requests.raw_prompt_ids(prompts)
        self.scheduler.add(self.requests.build_prompts(request_id, prompt_ids, params, sink))
        return prompt_ids

    def abort_all(self) -> None:
        self.scheduler.abort_all()

    def is_idle(self) -> bool:
        """No request queued, waiting or running."""
        return not self.scheduler.has_work()

    # -- state ------------------------------------------------------------------------------
    def get_stats(self) -> Mapping[str, int | float]:
        """Every figure by its name (the seed's Engine API: a read-only dict)."""
        return MappingProxyType(self.stats().as_dict())

    def stats(self) -> WorkerStats:
        """The same figures typed, as a Heartbeat carries them."""
        counters = self.scheduler.counters
        cache = self.cache.stats()
        disk = cache.disk or NO_DISK_TIER
        bytes_per_page = cache.bytes_reserved // max(1, cache.pages_total)
        return WorkerStats(
            total_tasks=counters.total_tasks,
            total_tokens=counters.total_tokens,
            prefill_tokens=counters.prefill_tokens,
            decode_steps=counters.decode_steps,
            preemptions=counters.preemptions,
            finished_tasks=counters.finished_tasks,
            active_tasks=self.scheduler.num_running,
            waiting_queue=self.scheduler.num_waiting,
            kv_pages_total=cache.pages_total,
            kv_pages_in_use=cache.pages_in_use,
            kv_pages_cached=cache.pages_cached,
            kv_pages_free=cache.pages_free,
            kv_page_size=cache.page_size,
            kv_bytes_reserved=cache.bytes_reserved,
            kv_bytes_in_use=cache.pages_in_use * bytes_per_page,
            kv_bytes_peak_in_use=cache.pages_peak_in_use * bytes_per_page,
            prefix_cache_hit_tokens=cache.hit_tokens,
            prefix_cache_query_tokens=cache.query_tokens,
            prefix_cache_disk_hit_tokens=cache.disk_hit_tokens,
            kv_disk_bytes=disk.bytes_on_disk,
            kv_disk_pages_written=disk.pages_written,
            kv_disk_pages_dropped=disk.pages_dropped,
            kv_disk_read_failures=disk.read_failures,
            grammar_compile_seconds=self.requests.grammars.compile_seconds,
            grammar_mask_seconds=self.scheduler.sampler.grammar_masks.mask_seconds,
            grammar_masked_rows=self.scheduler.sampler.grammar_masks.masked_rows,
            draft_tokens=counters.draft_tokens,
            accepted_draft_tokens=counters.accepted_draft_tokens,
            total_embeddings=counters.embeddings,
            total_rerank_documents=counters.rerank_documents,
        )

    def shutdown(self) -> None:
        self.scheduler.stop()
        self._thread.join(30.0)
        self.cache.close()

    def __enter__(self) -> InferenceEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def prefill_note(opts: EngineOptions) -> str:
    """How many prompt tokens a step feeds, as the startup log says it."""
    alone = f"{max(opts.prefill_token_budget, opts.idle_prefill_token_budget)} while none decodes"
    if opts.prefill_step_ms == 0:
        return f"prompt tokens a step: {opts.prefill_token_budget} while streams decode, {alone}"
    return (
        f"prompt tokens a step: while streams decode {opts.prefill_token_budget} at most, fewer "
        f"where a step would outlast {opts.prefill_step_ms} ms (measured), {alone}"
    )
