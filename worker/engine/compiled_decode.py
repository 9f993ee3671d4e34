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
# specializes size 1); two or more share a graph with dynamic sizes. Sizes that are equal
# when a graph is traced are assumed equal for good, so the contexts must differ from each
# other and from every dimension of the inputs (a context of 3 once equalled the kv-head
# count, pinning the one-sequence graph to 3 keys and recompiling it for the first request).
_WARMUP_SHAPES = ((1, 37), (2, 41))


class CompiledDecode:
    """Decode forwards of fewer than FLOAT32_FROM_ROWS sequences, compiled.

    There a step is memory bound and most of its time outside the matmuls is ~600 small
    ops dispatched from Python; inductor fuses them (docs/BENCHMARKS.md). Larger batches are
    compute bound, gain little, and stay eager, as do prefills, whose per-sequence attention
    loop varies in length.
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
    def warm_up(
        self,
        cache: KVCache,
        device: torch.device,
        prepare: Callable[[ForwardBatch], ForwardBatch] = lambda batch: batch,
    ) -> None:
        """Compile every graph now, so no request waits for it; then clear the rows used.

        `prepare` completes each batch as the runner would (ModelRunner.with_attention_plan).
        """
        start = time.monotonic()
        for num_seqs, context in _WARMUP_SHAPES:
            # Fresh tensors laid out as ModelRunner.build_batch lays them out: strides are
            # guarded too (a strided view's stride of 37 was once equated with a context).
            positions = torch.full((num_seqs,), context - 1)
            keys = torch.arange(context)
            mask = keys[None, None, :] <= positions[:, None, None]  # (B, 1, T)
            batch = ForwardBatch(
                positions=positions.to(device),
                write_slots=(torch.arange(num_seqs) * context + context - 1).to(device),
                read_slots=torch.arange(num_seqs * context).view(num_seqs, context).to(device),
                mask=mask[:, None].to(device),
                query_index=None,
                logits_index=torch.arange(num_seqs).to(device),
                max_query_len=1,
            )
            input_ids = torch.zeros(num_seqs, dtype=torch.int64, device=device)
            self._compiled(input_ids, prepare(batch), cache.layer_views())
        # The warm-up wrote k/v into rows no sequence owns yet; leave them as they were.
        cache.storage.k.zero_()
        cache.storage.v.zero_()
        log.info("compiled the decode step in %.1f s", time.monotonic() - start)
