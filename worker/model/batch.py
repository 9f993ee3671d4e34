"""The explicit per-forward metadata the model reads: positions, cache slots, masks, outputs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from worker.kv.base import LayerKV
from worker.model.paged_attention import InPlaceAttention
from worker.model.shared_prefix import SharedPrefix

__all__ = ["ForwardBatch", "LayerKV"]  # LayerKV: the cache's view, which the layers take


@dataclass(frozen=True)
class ForwardBatch:
    """Everything attention needs to know about one forward, passed in, never global.

    Tokens are packed: the N new tokens of B sequences lie back to back, sequence by
    sequence. Cache slots are flat row indices into a layer's k/v storage, so a paged
    cache and a contiguous cache look the same to attention.

    Layer by layer, every new token's k/v is written before any query reads the cache;
    that is what lets a sequence in this batch attend to pages another sequence of the
    same batch is filling (prefix sharing among requests that arrive together).
    """

    positions: torch.Tensor  # (N,) int64: absolute position of each new token
    write_slots: torch.Tensor  # (N,) int64: cache row receiving each new token's k/v
    read_slots: torch.Tensor  # (B, T) int64: cache rows of each sequence's context, padded
    # (B, 1, Q*G, T) bool, True = may attend; row q*G + g is query q of the g-th head in a
    # kv group (G = heads per kv head). Decode (Q == 1) passes (B, 1, 1, T) and broadcasts.
    # A packed batch with an in-place plan passes (B, 1, 0, 0): nothing reads it.
    mask: torch.Tensor
    query_index: torch.Tensor | None  # (N,) packed → (B*Q) padded row; None when all Q == 1
    logits_index: torch.Tensor  # (S,) packed rows whose next-token logits are wanted
    max_query_len: int  # Q
    # Per sequence (query tokens, context length incl. them), when any query has > 1 token:
    # attention then runs sequence by sequence instead of over the (B, Q, T) padding.
    seq_lengths: tuple[tuple[int, int], ...] | None = None
    # Sequences (with seq_lengths) whose contexts begin with the same cache rows: attention
    # over those runs once for all of them (CPU; worker.model.shared_prefix).
    shared_prefixes: tuple[SharedPrefix, ...] = ()
    # Set when attention reads the cache in place (worker.model.paged_attention; the CUDA
    # default): the plan every layer's attention follows instead of gathering read_slots.
    in_place: InPlaceAttention | None = None
    # For a model whose sliding layers sit among full ones (Gemma): `mask` with the sliding
    # window applied too, read by the sliding layers; None for every other model.
    window_mask: torch.Tensor | None = None
    # (H,) packed rows whose final-norm output is wanted too (embeddings pool it); None: none.
    hidden_index: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.positions.shape[0])

    @property
    def num_seqs(self) -> int:
        return int(self.read_slots.shape[0])
