"""The native causal prefill attention against torch's SDPA under the same causal mask, and the
model's prefill through it against the SDPA path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.worker.model_factory import (
    Chunk,
    max_diff,
    model_pair,
    new_cache,
    prefill_batch,
    random_tokens,
    reference_logits,
    run,
)
from tests.worker.native import needs_native_kernels
from worker.kernels import build

pytestmark = [
    needs_native_kernels,
    pytest.mark.skipif(
        not build.prefill_attention_available(),
        reason="the native prefill attention needs AVX-512: SDPA computes it here",
    ),
]


def sdpa_causal(queries, keys, values, group):
    """queries (KVH, Q*G, D), row q*G + g, the last Q of the T keys (T, KVH, D)."""
    rows, total = queries.shape[1], keys.shape[0]
    position = torch.arange(rows // group).repeat_interleave(group) + total - rows // group
    allowed = torch.arange(total)[None, :] <= position[:, None]
    mask = torch.zeros(rows, total).masked_fill(~allowed, float("-inf"))
    k, v = keys.transpose(0, 1)[None], values.transpose(0, 1)[None]
    return F.scaled_dot_product_attention(queries[None], k, v, mask[None, None])[0]


# (kv heads, group, head dim, queries, keys): whole and partial 48-row blocks and 64-key
# blocks, a chunk after a long context, one query, head sizes with a 16-wide value pass.
SHAPES = [
    (3, 3, 64, 256, 256),
    (3, 3, 64, 100, 777),
    (2, 4, 128, 7, 50),
    (1, 1, 96, 1, 1),
    (4, 2, 64, 33, 2000),
    (2, 2, 256, 17, 70),
    (1, 5, 80, 13, 13),
]


@pytest.mark.parametrize(("kv_heads", "group", "dim", "queries", "keys"), SHAPES)
def test_equals_sdpa_under_the_causal_mask(kv_heads, group, dim, queries, keys):
    torch.manual_seed(kv_heads * 1000 + keys)
    q = torch.randn(kv_heads, queries * group, dim) * 2
    k, v = torch.randn(keys, kv_heads, dim) * 2, torch.randn(keys, kv_heads, dim)
    got = torch.ops.astrai.prefill_attention(q, k, v, group)
    torch.testing.assert_close(got, sdpa_causal(q, k, v, group), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("kv_heads", "group", "dim", "queries", "keys"), SHAPES)
def test_the_cache_read_in_place_gives_the_gathered_rows_bits(kv_heads, group, dim, queries, keys):
    """Key t at cache row slots[t]: pages of 16 rows in shuffled order, a page cut short, and
    rows of other sequences between them, against the same rows gathered first."""
    torch.manual_seed(keys)
    pages = torch.randperm(keys // 16 + 4)[: -(-keys // 16)] * 16
    slots = (pages[:, None] + torch.arange(16)).reshape(-1)[:keys].contiguous()
    if keys > 40:
        slots[35] = slots[-1] + 16  # one key off its page: the slow transpose's rows
    rows = int(slots.max()) + 1
    k_cache, v_cache = torch.randn(rows, kv_heads, dim), torch.randn(rows, kv_heads, dim)
    q = torch.randn(kv_heads, queries * group, dim)
    gathered = torch.ops.astrai.prefill_attention(q, k_cache[slots], v_cache[slots], group)
    in_place = torch.ops.astrai.prefill_attention(q, k_cache, v_cache, group, slots)
    assert torch.equal(in_place, gathered)


def test_slots_outside_the_cache_are_refused():
    q, k = torch.randn(2, 6, 64), torch.randn(10, 2, 64)
    with pytest.raises(RuntimeError, match="within the cache"):
        torch.ops.astrai.prefill_attention(q, k, k, 3, torch.tensor([0, 1, 10]))
    with pytest.raises(RuntimeError, match="int64"):
        torch.ops.astrai.prefill_attention(q, k, k, 3, torch.tensor([0, 1, 2], dtype=torch.int32))


def test_bad_shapes_are_refused_by_name():
    q, k = torch.randn(2, 6, 64), torch.randn(10, 2, 64)
    with pytest.raises(RuntimeError, match="multiple of 16"):
        narrow = k[..., :40].contiguous()
        torch.ops.astrai.prefill_attention(q[..., :40].contiguous(), narrow, narrow, 3)
    with pytest.raises(RuntimeError, match="no more than the keys"):
        torch.ops.astrai.prefill_attention(torch.randn(2, 33, 64), k, k, 3)
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.astrai.prefill_attention(q.double(), k.double(), k.double(), 3)


def test_a_models_chunked_prefill_through_it_gives_the_sdpa_paths_logits(tmp_path, monkeypatch):
    """A 120-token prompt in two chunks (the second over the first's cached rows, two 64-key
    blocks) through the model, with the kernel and with SDPA, against transformers."""
    hf, ours = model_pair("llama", tmp_path)
    tokens = random_tokens(120, seed=4)

    def prefill() -> torch.Tensor:
        cache = new_cache(ours.config, 1, max_len=len(tokens))
        first = run(ours, cache, *prefill_batch(ours.config, [Chunk(0, tokens[:70])]))
        chunk = Chunk(0, tokens[70:], start=70)
        return torch.cat([first, run(ours, cache, *prefill_batch(ours.config, [chunk]))])

    asked: list[bool] = []

    def available() -> bool:
        asked.append(True)
        return True

    monkeypatch.setattr("worker.model.attention.prefill_attention_available", available)
    native = prefill()
    assert asked  # the layers took the kernel's path (head_dim 16: a multiple of 16)
    monkeypatch.setattr("worker.model.attention.prefill_attention_available", lambda: False)
    sdpa = prefill()
    torch.testing.assert_close(native, sdpa, rtol=1e-4, atol=1e-4)
    assert max_diff(native, reference_logits(hf, tokens)) < 1e-3
