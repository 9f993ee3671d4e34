"""Attention over a KV cache: fused q/k/v, RoPE, the step's rows written, then SDPA per batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from worker.kernels.build import native_kernels_available, prefill_attention_available
from worker.kv.kv_rows import is_quantized, read_rows, write_rows
from worker.model.batch import ForwardBatch, LayerKV
from worker.model.causal_prefix import MIN_PREFIX_KEYS, attend_after_prefix
from worker.model.config import ModelConfig
from worker.model.norm import RMSNorm
from worker.model.paged_attention import attend_in_place
from worker.model.rope import apply_rope
from worker.model.shared_prefix import attend_shared, attend_shared_in_place
from worker.model.soft_capped_attention import soft_capped_attention


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.group = config.kv_group_size
        self.window = config.layer_window(layer) or 0  # 0: attend to the whole context
        # This layer's window differs from the one in a forward's main mask: it reads the
        # batch's window_mask (Gemma's sliding layers among full ones).
        self.reads_window_mask = config.has_mixed_windows and bool(self.window)
        # Every attention path scales q·k by D^-0.5; a model with another scale (Gemma's
        # query_pre_attn_scalar) has its queries multiplied by the ratio first.
        default = config.head_dim**-0.5
        query_scale = config.query_scale or default
        self.query_factor = None if query_scale == default else query_scale / default
        self.softcap = config.attn_softcap
        qkv_out = (config.num_heads + 2 * config.num_kv_heads) * config.head_dim
        # q, k and v projections fused into one matmul; the loader concatenates the weights.
        self.qkv_proj = nn.Linear(config.hidden_size, qkv_out, bias=config.qkv_bias)
        self.o_proj = nn.Linear(
            config.num_heads * config.head_dim, config.hidden_size, bias=config.o_bias
        )
        # Qwen3 normalises each head of q and k (one weight over head_dim) before RoPE.
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps) if config.qk_norm else None
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps) if config.qk_norm else None

    def forward(
        self,
        x: torch.Tensor,  # (N, hidden)
        cos: torch.Tensor,  # (N, 1, D)
        sin: torch.Tensor,  # (N, 1, D)
        batch: ForwardBatch,
        kv: LayerKV,
    ) -> torch.Tensor:
        return self.o_proj(self.attend(self.qkv_proj(x), cos, sin, batch, kv))

    def attend(
        self,
        qkv: torch.Tensor,  # (N, (H + 2 KVH) * D): the projected q, k and v
        cos: torch.Tensor,  # (N, 1, D)
        sin: torch.Tensor,  # (N, 1, D)
        batch: ForwardBatch,
        kv: LayerKV,
    ) -> torch.Tensor:
        """(N, H * D): RoPE, the step's k/v written into the cache, attention; no o_proj."""
        n = qkv.shape[0]
        h, kvh = self.num_heads, self.num_kv_heads
        qkv = self.prepared_qkv(qkv).view(n, h + 2 * kvh, self.head_dim)
        qk = self._rotated(qkv, cos, sin)  # (N, H + KVH, D), RoPE before the write
        q, k, v = qk[:, :h], qk[:, h:], qkv[:, h + kvh :]
        k_cache, v_cache = kv
        write_rows(k_cache, batch.write_slots, k)
        write_rows(v_cache, batch.write_slots, v)
        if self.softcap is not None:
            return soft_capped_attention(q, k_cache, v_cache, batch, self._mask(batch), self)
        return self._attend(q, k_cache, v_cache, batch)

    def _rotated(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """(N, H + KVH, D): the q and k heads of qkv (N, H + 2 KVH, D) with RoPE applied; on
        the CPU in float32 by `astrai::rope`, one pass instead of five torch ops, the same bits."""
        heads, (n, _, d) = self.num_heads + self.num_kv_heads, qkv.shape
        native = qkv.device.type == "cpu" and qkv.dtype == cos.dtype == torch.float32
        if native and qkv.stride(2) == 1 and qkv.stride(1) == d and native_kernels_available():
            return torch.ops.astrai.rope(qkv, cos.reshape(n, d), sin.reshape(n, d), heads)
        return apply_rope(qkv[:, :heads], cos, sin)

    def prepared_qkv(self, qkv: torch.Tensor) -> torch.Tensor:
        """qkv (N, (H + 2 KVH) * D) with each q and k head normalised, where the model has
        q/k norms (Qwen3, Gemma 3), and q scaled by query_factor where it has one (RoPE is
        linear, so before or after it is the same); as it is otherwise."""
        if self.q_norm is None and self.query_factor is None:
            return qkv
        h, kvh, d = self.num_heads, self.num_kv_heads, self.head_dim
        heads = qkv.view(qkv.shape[0], h + 2 * kvh, d)
        q, k = heads[:, :h], heads[:, h : h + kvh]
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q).to(qkv.dtype), self.k_norm(k).to(qkv.dtype)
        if self.query_factor is not None:
            q = q * self.query_factor
        return torch.cat([q, k, heads[:, h + kvh :]], dim=1).view(qkv.shape)

    def _mask(self, batch: ForwardBatch) -> torch.Tensor:
        """The mask this layer reads: the sliding one where it slides among full layers."""
        if self.reads_window_mask:
            assert batch.window_mask is not None, "a mixed-window model's batch has both masks"
            return batch.window_mask
        return batch.mask

    def _attend(
        self,
        q: torch.Tensor,  # (N, H, D)
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        if batch.in_place is not None:
            return attend_in_place(q, k_cache, v_cache, batch.in_place)
        mask = self._mask(batch)
        # Prefill attention runs in float32 on the CPU, where bf16 arithmetic is slower
        # (docs/BENCHMARKS.md, Figures behind the code); one-row decode runs in the cache's
        # dtype, as converting every cached row would cost more than it saves, except a
        # float16 cache on the CPU, whose arithmetic the CPU has no instructions for (q8_0
        # rows are read back as float32).
        dtype = torch.float32 if is_quantized(k_cache) else k_cache.dtype
        on_cpu = q.device.type == "cpu"
        prefill = batch.max_query_len > 1 or batch.seq_lengths is not None  # prompt rows
        if on_cpu and (prefill or dtype == torch.float16):
            dtype = torch.float32
        if batch.seq_lengths is not None:
            return self._attend_each(q.to(dtype), k_cache, v_cache, batch, mask).to(q.dtype)
        b = batch.num_seqs
        qlen = batch.max_query_len
        d, kvh, g = self.head_dim, self.num_kv_heads, self.group
        # index_select on the flattened rows: faster than k_cache[read_slots] on the CPU.
        rows = batch.read_slots.view(-1)
        shape = (b, batch.read_slots.shape[1], kvh, d)
        keys = read_rows(k_cache, rows).view(shape).to(dtype).transpose(1, 2)  # (B,KVH,T,D)
        values = read_rows(v_cache, rows).view(shape).to(dtype).transpose(1, 2)
        if batch.query_index is None:  # every sequence feeds one token: N == B
            grouped = q.to(dtype).view(b, kvh, g, d)  # (B, KVH, G, D)
        else:
            padded = q.new_zeros(b * qlen, self.num_heads, d, dtype=dtype)
            padded.index_copy_(0, batch.query_index, q.to(dtype))
            # Query heads of one kv group sit together: (B, KVH, Q*G, D), row = q*G + g.
            grouped = padded.view(b, qlen, kvh, g, d).transpose(1, 2).reshape(b, kvh, qlen * g, d)
        out = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask)
        if batch.query_index is None:
            return out.reshape(b, self.num_heads * d)
        out = out.view(b, kvh, qlen, g, d).transpose(1, 2).reshape(b * qlen, self.num_heads * d)
        return out.index_select(0, batch.query_index).to(q.dtype)

    def _attend_each(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        batch: ForwardBatch,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Attention sequence by sequence: no query or key padding to compute through.

        A 24-token tail and an 88-token chunk in one padded forward cost as much as 20
        88-token chunks; per sequence, each pays for its own rows (docs/BENCHMARKS.md,
        Figures behind the code). Sequences that share leading rows attend over them
        together (worker.model.shared_prefix); the other one-token rows (decoding sequences
        riding in a prefill's forward) in one padded attention.
        """
        d, kvh, g = self.head_dim, self.num_kv_heads, self.group
        assert batch.seq_lengths is not None
        # A plain causal mask (no window), float32 on the CPU: the native kernels, which read
        # the causal limit from the positions rather than a mask (docs/BENCHMARKS.md, "The
        # native causal prefill attention"); without them, a chunk after thousands of keys
        # attends those with no mask (worker.model.causal_prefix).
        causal = self.window == 0 and q.device.type == "cpu"
        native = causal and d % 16 == 0 and q.dtype == torch.float32
        native = native and prefill_attention_available()
        in_place = k_cache.dtype == q.dtype and k_cache.shape[1:] == (kvh, d)
        in_place = in_place and k_cache.is_contiguous() and v_cache.is_contiguous()
        out = q.new_empty(q.shape[0], self.num_heads * d)
        grouped: set[int] = set()
        for prefix in batch.shared_prefixes:
            shared = batch.read_slots[prefix.seqs[0], : prefix.length]
            attend = attend_shared_in_place if native and in_place else attend_shared
            out.index_copy_(0, prefix.query_rows, attend(q, k_cache, v_cache, shared, prefix))
            grouped.update(prefix.seqs)
        offsets = [0]
        for qlen, _ in batch.seq_lengths:
            offsets.append(offsets[-1] + qlen)
        single = [
            i for i, (qlen, _) in enumerate(batch.seq_lengths) if qlen == 1 and i not in grouped
        ]
        if len(single) > 1:
            rows = torch.tensor([offsets[i] for i in single], device=q.device)
            attended = self._attend_rows(q, k_cache, v_cache, batch, mask, single, rows)
            out.index_copy_(0, rows, attended)
            grouped.update(single)
        for i, (qlen, klen) in enumerate(batch.seq_lengths):
            if i in grouped:
                continue
            start = offsets[i]
            slots = batch.read_slots[i, :klen]
            # (KVH, Q*G, D), row q*G + g: the layout of the batch's mask rows.
            queries = q[start : start + qlen].view(qlen, kvh, g, d).transpose(0, 1)
            queries = queries.reshape(kvh, qlen * g, d)
            if native and in_place:  # the cache's rows read where they lie, not gathered
                att = torch.ops.astrai.prefill_attention(
                    queries.contiguous(), k_cache, v_cache, g, slots.contiguous()
                )
            else:
                keys = read_rows(k_cache, slots).to(q.dtype).view(klen, kvh, d)
                values = read_rows(v_cache, slots).to(q.dtype).view(klen, kvh, d)
                if native:
                    att = torch.ops.astrai.prefill_attention(queries.contiguous(), keys, values, g)
                elif causal and klen - qlen >= MIN_PREFIX_KEYS:  # no mask for the keys before
                    att = attend_after_prefix(queries, keys, values, g)
                else:
                    rows_mask = mask[i : i + 1, :, : qlen * g, :klen]
                    # 4-d inputs: with 3-d ones the CPU falls back from the flash kernel to a
                    # slow reference path (bmm, where, softmax; docs/BENCHMARKS.md, Figures
                    # behind the code).
                    att = F.scaled_dot_product_attention(
                        queries[None],
                        keys.transpose(0, 1)[None],
                        values.transpose(0, 1)[None],
                        rows_mask,
                    )[0]
            att = att.view(kvh, qlen, g, d).transpose(0, 1).reshape(qlen, kvh * g * d)
            out[start : start + qlen] = att
        return out

    def _attend_rows(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        batch: ForwardBatch,
        mask: torch.Tensor,
        seqs: list[int],
        rows: torch.Tensor,  # the packed row of each one's query
    ) -> torch.Tensor:
        """(len(seqs), H * D): one-query sequences over their padded contexts at once."""
        d, kvh, g = self.head_dim, self.num_kv_heads, self.group
        assert batch.seq_lengths is not None
        index = torch.tensor(seqs, device=q.device)
        longest = max(batch.seq_lengths[i][1] for i in seqs)
        slots = batch.read_slots.index_select(0, index)[:, :longest].reshape(-1)
        shape = (len(seqs), longest, kvh, d)
        keys = read_rows(k_cache, slots).view(shape).to(q.dtype).transpose(1, 2)
        values = read_rows(v_cache, slots).view(shape).to(q.dtype).transpose(1, 2)
        queries = q.index_select(0, rows).view(len(seqs), kvh, g, d)  # (S, KVH, G, D)
        rows_mask = mask.index_select(0, index)[:, :, :g, :longest]  # query 0's rows
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=rows_mask)
        return out.reshape(len(seqs), self.num_heads * d)
