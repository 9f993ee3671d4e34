"""ModelRunner: turns scheduled token chunks into one packed forward over the KV cache."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from worker.engine.compiled_decode import CompiledDecode
from worker.engine.step_plan import Chunk
from worker.kv.base import KVCache
from worker.model.batch import ForwardBatch
from worker.model.llama import LlamaModel, ModelOutput
from worker.model.paged_attention import plan_in_place
from worker.model.shared_prefix import SharedPrefix, find_shared_prefixes


class ModelRunner:
    def __init__(
        self,
        model: LlamaModel,
        cache: KVCache,
        compiled_decode: CompiledDecode | None = None,
        in_place_attention: bool = False,
    ) -> None:
        self.model = model
        self.cache = cache
        self.compiled_decode = compiled_decode
        # Every batch carries a plan for attention over the cache in place (flex_attention).
        self.in_place_attention = in_place_attention
        self.device = model.device
        config = model.config
        self.kv_group_size = config.kv_group_size
        self.sliding_window = config.mask_window  # every layer's window, in the main mask
        # Sliding layers among full ones (Gemma): their window in a second mask.
        self.layer_window = config.sliding_window if config.has_mixed_windows else None
        # Attention over shared prompt rows once for several sequences (CPU, gathered) holds
        # for plain causal masks and uncapped scores only.
        self.shares_prefixes = (
            config.mask_window is None and self.layer_window is None and config.attn_softcap is None
        )

    @torch.inference_mode()
    def forward(self, chunks: Sequence[Chunk]) -> ModelOutput:
        """(S, vocab) float32 logits: each chunk's `num_logit_rows` rows, in chunk order; and
        where a chunk keeps `hidden_rows`, their final-norm output, in chunk order."""
        input_ids, batch = self.build_batch(chunks)
        if batch.hidden_index is None:
            return ModelOutput(self.forward_batch(input_ids, batch), None)
        batch = self.with_attention_plan(batch)  # not compiled: that graph returns logits
        return self.model.outputs(input_ids, batch, self.cache.layer_views())

    @torch.inference_mode()
    def forward_batch(self, input_ids: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        """The forward of a batch already built: compiled where that handles it."""
        batch = self.with_attention_plan(batch)
        compiled = self.compiled_decode
        if compiled is not None and compiled.handles(batch):
            return compiled(input_ids, batch, self.cache.layer_views())
        logits: torch.Tensor = self.model(input_ids, batch, self.cache.layer_views())
        return logits

    def with_attention_plan(self, batch: ForwardBatch) -> ForwardBatch:
        """The batch with the in-place attention plan it needs, where the runner makes one.

        build_batch adds the plan from the lengths it has at hand; a batch made elsewhere (a
        warm-up, the decode-cost probe) gets it here, its lengths read back from the device;
        so does such a decode batch its window mask, where the model's layers need one.
        """
        if self.layer_window is not None and batch.window_mask is None:
            if batch.query_index is not None:
                raise ValueError("a packed batch of a mixed-window model needs its window mask")
            key_pos = torch.arange(batch.read_slots.shape[1], device=batch.mask.device)
            windowed = key_pos[None, :] > batch.positions[:, None] - self.layer_window
            batch = dataclasses.replace(batch, window_mask=batch.mask & windowed[:, None, None])
        if not self.in_place_attention or batch.in_place is not None:
            return batch
        if batch.seq_lengths is not None:
            query_lengths = [q for q, _ in batch.seq_lengths]
            contexts = [c for _, c in batch.seq_lengths]
        else:
            query_lengths = [1] * batch.num_seqs
            contexts = [p + 1 for p in batch.positions.tolist()]
        return self._planned(batch, query_lengths, contexts)

    def _planned(
        self, batch: ForwardBatch, query_lengths: list[int], contexts: list[int]
    ) -> ForwardBatch:
        plan = plan_in_place(
            batch.read_slots,
            batch.positions,
            query_lengths,
            contexts,
            self.cache.layer_views()[0][0].shape[0],
            self.sliding_window,
        )
        return dataclasses.replace(batch, in_place=plan)

    def build_batch(self, chunks: Sequence[Chunk]) -> tuple[torch.Tensor, ForwardBatch]:
        if not chunks:
            raise ValueError("a forward needs at least one chunk")
        lengths = [len(c.token_ids) for c in chunks]
        if min(lengths) < 1:
            raise ValueError("every chunk must feed at least one token")
        if max(lengths) == 1 and not any(c.prompt for c in chunks):
            return self._decode_batch(chunks)
        return self._packed_batch(chunks, lengths)

    def _packed_batch(
        self, chunks: Sequence[Chunk], lengths: list[int]
    ) -> tuple[torch.Tensor, ForwardBatch]:
        """Any mix of prefill and decode chunks, packed back to back; per-sequence lengths
        (the prefill's attention) wherever a chunk is a prompt's, even of one token."""
        ends = [c.end for c in chunks]
        offsets = torch.tensor([0, *lengths]).cumsum(0)
        positions = torch.cat([torch.arange(c.start, c.end) for c in chunks])
        write_slots = torch.tensor(
            [slot for c in chunks for slot in self.cache.slots(c.seq_id, c.start, c.end)]
        )
        read_slots = self.cache.read_slots([c.seq_id for c in chunks], ends)
        num_keys = read_slots.shape[1]
        query_len = max(lengths)
        starts = torch.tensor([c.start for c in chunks])
        key_pos = torch.arange(num_keys)
        if query_len == 1:
            query_index = None
            query_pos = starts[:, None]  # (B, 1)
        else:
            rows = torch.repeat_interleave(torch.arange(len(chunks)), torch.tensor(lengths))
            within = torch.arange(positions.shape[0]) - offsets[:-1][rows]
            query_index = rows * query_len + within
            query_pos = starts[:, None] + torch.arange(query_len)[None, :]  # (B, Q)
        shared_prefixes: tuple[SharedPrefix, ...] = ()
        window_mask: torch.Tensor | None = None
        if self.in_place_attention:
            # Not read: attention follows the in-place plan. The (B, Q*G, T) mask would be a
            # prefill's largest copy to the device, and slow to build.
            mask = torch.empty((len(chunks), 0, 0), dtype=torch.bool)
        else:
            mask = key_pos[None, None, :] <= query_pos[:, :, None]  # (B, Q, T) causal
            if self.sliding_window is not None:
                mask &= key_pos[None, None, :] > query_pos[:, :, None] - self.sliding_window
            if self.layer_window is not None:
                windowed = key_pos[None, None, :] > query_pos[:, :, None] - self.layer_window
                window_mask = mask & windowed
            if query_len > 1:
                mask = mask.repeat_interleave(self.kv_group_size, dim=1)  # rows q*G + g
                if window_mask is not None:
                    window_mask = window_mask.repeat_interleave(self.kv_group_size, dim=1)
        gathered_on_cpu = self.device.type == "cpu" and not self.in_place_attention
        if query_len > 1 and gathered_on_cpu and self.shares_prefixes:
            shared_prefixes = find_shared_prefixes(
                read_slots, [c.start for c in chunks], mask, lengths, self.kv_group_size
            )
        logits_index = torch.tensor(
            [
                row
                for c, end in zip(chunks, offsets[1:].tolist(), strict=True)
                for row in range(end - c.num_logit_rows, end)
            ],
            dtype=torch.int64,
        )
        input_ids = torch.tensor([t for c in chunks for t in c.token_ids])
        hidden_index = _hidden_index(chunks, offsets[:-1].tolist())
        device = self.device
        batch = ForwardBatch(
            positions=positions.to(device),
            write_slots=write_slots.to(device),
            read_slots=read_slots.to(device),
            mask=mask[:, None].to(device),
            query_index=None if query_index is None else query_index.to(device),
            logits_index=logits_index.to(device),
            max_query_len=query_len,
            seq_lengths=(
                tuple(zip(lengths, ends, strict=True))
                if query_len > 1 or any(c.prompt for c in chunks)
                else None
            ),
            shared_prefixes=shared_prefixes,
            window_mask=None if window_mask is None else window_mask[:, None].to(device),
            hidden_index=None if hidden_index is None else hidden_index.to(device),
        )
        if self.in_place_attention:
            batch = self._planned(batch, lengths, ends)
        return input_ids.to(device), batch

    def _decode_batch(self, chunks: Sequence[Chunk]) -> tuple[torch.Tensor, ForwardBatch]:
        """build_batch for one new token per sequence, the common step: the same batch with
        a third of the tensor operations, which show at one row (docs/BENCHMARKS.md)."""
        starts = [c.start for c in chunks]
        positions = torch.tensor(starts)
        write_slots = torch.tensor([self.cache.slots(c.seq_id, c.start, c.end)[0] for c in chunks])
        read_slots = self.cache.read_slots([c.seq_id for c in chunks], [s + 1 for s in starts])
        key_pos = torch.arange(read_slots.shape[1])
        mask = key_pos[None, :] <= positions[:, None]  # (B, T) causal
        if self.sliding_window is not None:
            mask &= key_pos[None, :] > positions[:, None] - self.sliding_window
        window_mask = None
        if self.layer_window is not None:
            window_mask = mask & (key_pos[None, :] > positions[:, None] - self.layer_window)
        wanted = [i for i, c in enumerate(chunks) if c.num_logit_rows]
        hidden_index = _hidden_index(chunks, range(len(chunks)))
        device = self.device
        batch = ForwardBatch(
            positions=positions.to(device),
            write_slots=write_slots.to(device),
            read_slots=read_slots.to(device),
            mask=mask[:, None, None, :].to(device),
            query_index=None,
            logits_index=torch.tensor(wanted, dtype=torch.long).to(device),
            max_query_len=1,
            window_mask=None if window_mask is None else window_mask[:, None, None, :].to(device),
            hidden_index=None if hidden_index is None else hidden_index.to(device),
        )
        if self.in_place_attention:
            batch = self._planned(batch, [1] * len(chunks), [s + 1 for s in starts])
        return torch.tensor([c.token_ids[0] for c in chunks]).to(device), batch


def _hidden_index(chunks: Sequence[Chunk], first_rows: Sequence[int]) -> torch.Tensor | None:
    """The packed rows whose final-norm output the chunks keep (chunk i's rows start at
    first_rows[i]), or None when none does."""
    rows = [first + r for c, first in zip(chunks, first_rows, strict=True) for r in c.hidden_rows]
    return torch.tensor(rows, dtype=torch.int64) if rows else None
