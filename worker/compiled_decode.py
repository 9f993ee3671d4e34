"""CompiledDecode: the model's few-row decode step through torch.compile, warmed up at load."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import torch

from worker.kv.base import KVCache
from worker.model.batch import ForwardBatch, LayerKV
from worker.model.linear import FLOAT32_FROM_ROWS
from worker.model.llama import LlamaModel

log = logging.getLogger(__name__)

# Warm-up shapes: (sequences, context). One sequence gets a graph of its own (torch
# specializes size 1); two or more share a graph with dynamic sizes. The sizes differ from
# each other and from every model dimension, so no size is assumed equal to another.
_WARMUP_SHAPES = ((1, 3), (2, 7))


class CompiledDecode:
    """Decode forwards of fewer than FLOAT32_FROM_ROWS sequences, compiled.

    There a step is memory bound and most of its time outside the matmuls is ~600 small
    ops dispatched from Python; inductor fuses them (1.35x per step at one sequence on a
    2-core CPU, docs/BENCHMARKS.md). Larger batches are compute bound, gain little, and stay
    eager, as do prefills, whose per-sequence attention loop varies in length.
    """

    def __init__(self, model: LlamaModel) -> None:
        self._compiled: Callable[..., torch.Tensor] = torch.compile(model, dynamic=True)

    @staticmethod
    def handles(batch: ForwardBatch) -> bool:
        return batch.max_query_len == 1 and batch.num_seqs < FLOAT32_FROM_ROWS

    def __call__(
        self, input_ids: torch.Tensor, batch: ForwardBatch, kv_layers: Sequence[LayerKV]
    ) -> torch.Tensor:
        return self._compiled(input_ids, batch, kv_layers)

    @torch.inference_mode()  # the runner's tensors are inference tensors: same guards
    def warm_up(self, cache: KVCache, device: torch.device) -> None:
        """Compile every graph now, so no request waits for it; then clear the rows used."""
        start = time.monotonic()
        for num_seqs, context in _WARMUP_SHAPES:
            read_slots = torch.arange(num_seqs * context, device=device).view(num_seqs, context)
            batch = ForwardBatch(
                positions=torch.full((num_seqs,), context - 1, device=device),
                write_slots=read_slots[:, -1].contiguous(),
                read_slots=read_slots,
                mask=torch.ones(num_seqs, 1, 1, context, dtype=torch.bool, device=device),
                query_index=None,
                logits_index=torch.arange(num_seqs, device=device),
                max_query_len=1,
            )
            input_ids = torch.zeros(num_seqs, dtype=torch.int64, device=device)
            self._compiled(input_ids, batch, cache.layer_views())
        # The warm-up wrote k/v into rows no sequence owns yet; leave them as they were.
        cache.storage.k.zero_()
        cache.storage.v.zero_()
        log.info("compiled the decode step in %.1f s", time.monotonic() - start)
