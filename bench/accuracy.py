"""Teacher-forced top-1 agreement of a model variant with the float32 model on a fixed text."""

from __future__ import annotations

from pathlib import Path

import torch

from bench.workloads import SYSTEM_PROMPT_W2, TENANTS, tenant_system_prompt
from worker.kv.kv_rows import storage_width
from worker.model.batch import ForwardBatch
from worker.model.llama import LlamaModel
from worker.model.loader import load_model
from worker.text.tokenizer import Tokenizer

FIXED_TEXT = " ".join([SYSTEM_PROMPT_W2, *(tenant_system_prompt(*t) for t in TENANTS[:2])])


def sequence_logits(
    model: LlamaModel, ids: list[int], kv_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """(len(ids), vocab) logits of one sequence in one forward, over a private cache of
    `kv_dtype` (default: the model's), whose rows every position attends to as stored."""
    config = model.config
    n = len(ids)
    dtype = kv_dtype or model.dtype
    shape = (config.num_layers, n, config.num_kv_heads, storage_width(config.head_dim, dtype))
    k = torch.zeros(shape, dtype=dtype)
    v = torch.zeros_like(k)
    pos = torch.arange(n)

    def causal(window: int | None) -> torch.Tensor:  # (1, 1, N*G, N), rows q*G + g
        allowed = pos[None, :] <= pos[:, None]
        if window is not None:
            allowed &= pos[None, :] > pos[:, None] - window
        return allowed.repeat_interleave(config.kv_group_size, dim=0)[None, None]

    window_mask = causal(config.sliding_window) if config.has_mixed_windows else None
    # Per-sequence lengths: attention as a served prompt's prefill computes it.
    batch = ForwardBatch(
        pos,
        pos,
        pos[None],
        causal(config.mask_window),
        pos,
        pos,
        n,
        seq_lengths=((n, n),),
        window_mask=window_mask,
    )
    with torch.inference_mode():
        return model(torch.tensor(ids), batch, [(k[i], v[i]) for i in range(config.num_layers)])


def top1_agreement(
    model_dir: Path, variants: dict[str, dict], max_tokens: int = 1024
) -> dict[str, float]:
    """{variant name: fraction of positions whose argmax equals float32's}. A variant is
    load_model's keywords, plus `kv_dtype` for the cache it attends over."""
    ids = Tokenizer(model_dir).encode(FIXED_TEXT)[:max_tokens]
    cpu = torch.device("cpu")
    reference = sequence_logits(load_model(model_dir, torch.float32, cpu), ids).argmax(-1)

    def agreement(kw: dict) -> float:
        kw = dict(kw)
        kv_dtype = kw.pop("kv_dtype", None)
        logits = sequence_logits(load_model(model_dir, device=cpu, **kw), ids, kv_dtype)
        return (logits.argmax(-1) == reference).float().mean().item()

    return {name: agreement(kw) for name, kw in variants.items()} | {"positions": float(len(ids))}
