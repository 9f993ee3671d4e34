"""The fused decode attention: RoPE, the k/v write and attention over paged rows, vs torch."""

import pytest
import torch

from tests.worker.native import needs_native_kernels
from worker.kv.kv_rows import Q8_0, dequantize, quantize
from worker.model.config import ModelConfig
from worker.model.rope import apply_rope, rope_tables

pytestmark = needs_native_kernels

H, KVH, D = 6, 2, 16  # three query heads per kv head
# 72 = 64 + 8: the kernel's 64-column and 8-column value passes both run.
HEAD_DIMS = (D, 72)


def tables(D: int = D) -> tuple[torch.Tensor, torch.Tensor]:
    config = ModelConfig(
        model_type="llama",
        vocab_size=8,
        hidden_size=H * D,
        intermediate_size=8,
        num_layers=1,
        num_heads=H,
        num_kv_heads=KVH,
        head_dim=D,
        max_position_embeddings=64,
    )
    return rope_tables(config)


def expected_attention(qkv, positions, cos, sin, k_cache, v_cache, read_slots, window):
    """Per sequence: RoPE'd q against the cache rows 0..p (the new row already written)."""
    D = k_cache.shape[-1]
    outs = []
    for b, p in enumerate(positions.tolist()):
        q = qkv[b, : H * D].view(H, D)
        q = apply_rope(q[None], cos[p][None, None], sin[p][None, None])[0]
        first = max(0, p - window + 1) if window else 0
        rows = read_slots[b, first : p + 1]
        keys = k_cache[rows].transpose(0, 1).repeat_interleave(H // KVH, 0)  # (H, T, D)
        values = v_cache[rows].transpose(0, 1).repeat_interleave(H // KVH, 0)
        weights = torch.softmax((q[:, None, :] * keys).sum(-1) / D**0.5, dim=-1)  # (H, T)
        outs.append((weights[..., None] * values).sum(1).reshape(H * D))
    return torch.stack(outs)


def stored(cache: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A float cache in a cache dtype's stored form (q8_0: 34-byte blocks)."""
    return quantize(cache) if dtype == Q8_0 else cache.to(dtype)


def as_float(cache: torch.Tensor) -> torch.Tensor:
    return dequantize(cache) if cache.dtype == Q8_0 else cache.float()


def paged_case(lengths: list[int], seed: int = 0, D: int = D):
    """Sequences whose rows are scattered over a 96-row cache, as pages leave them."""
    g = torch.Generator().manual_seed(seed)
    k_cache, v_cache = torch.randn(96, KVH, D, generator=g), torch.randn(96, KVH, D, generator=g)
    order = torch.randperm(96, generator=g)
    longest = max(lengths)
    read_slots = torch.stack([order[i * longest : (i + 1) * longest] for i in range(len(lengths))])
    positions = torch.tensor([n - 1 for n in lengths])
    write_slots = read_slots[torch.arange(len(lengths)), positions]
    qkv = torch.randn(len(lengths), (H + 2 * KVH) * D, generator=g)
    return qkv, positions, k_cache, v_cache, write_slots, read_slots


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("D", HEAD_DIMS)
@pytest.mark.parametrize("window", [0, 4])
def test_matches_torch_over_scattered_rows_and_writes_the_new_rows(
    window: int, D: int, cache_dtype: torch.dtype
):
    """A float16 cache: the new rows are written rounded as torch rounds them, and the
    attention is the float32 one over the cache's values as they are."""
    cos, sin = tables(D)
    qkv, positions, k_cache, v_cache, write_slots, read_slots = paged_case([1, 7, 19], D=D)
    k_cache, v_cache = k_cache.to(cache_dtype), v_cache.to(cache_dtype)
    new_k = apply_rope(
        qkv[:, H * D : (H + KVH) * D].view(3, KVH, D),
        cos[positions][:, None],
        sin[positions][:, None],
    )
    new_v = qkv[:, (H + KVH) * D :].view(3, KVH, D)

    out = torch.ops.astrai.decode_attention(
        qkv, positions, cos, sin, k_cache, v_cache, write_slots, read_slots, H, KVH, window
    )

    # The new keys are rotated as a prompt chunk's are (astrai::rope): torch's bits.
    assert torch.equal(k_cache[write_slots], new_k.to(cache_dtype))
    assert torch.equal(v_cache[write_slots], new_v.to(cache_dtype))
    expected = expected_attention(
        qkv, positions, cos, sin, k_cache.float(), v_cache.float(), read_slots, window
    )
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("D", [64, 96])
@pytest.mark.parametrize("window", [0, 4])
def test_a_q8_0_cache_is_read_as_its_blocks_say_and_written_as_kv_rows_quantizes(
    window: int, D: int
):
    """The new v rows are the blocks worker.kv.kv_rows writes, bit for bit (k rows after a
    RoPE that may round differently: within one code); the attention is the float32 one over
    the blocks' values."""
    cos, sin = tables(D)
    qkv, positions, k_cache, v_cache, write_slots, read_slots = paged_case([1, 7, 19], D=D)
    k_cache, v_cache = quantize(k_cache), quantize(v_cache)
    assert k_cache.shape == (96, KVH, D // 32 * 34)
    new_k = apply_rope(
        qkv[:, H * D : (H + KVH) * D].view(3, KVH, D),
        cos[positions][:, None],
        sin[positions][:, None],
    )
    new_v = qkv[:, (H + KVH) * D :].view(3, KVH, D)

    out = torch.ops.astrai.decode_attention(
        qkv, positions, cos, sin, k_cache, v_cache, write_slots, read_slots, H, KVH, window
    )

    assert torch.equal(v_cache[write_slots], quantize(new_v))
    step = new_k.abs().amax() / 127
    torch.testing.assert_close(dequantize(k_cache[write_slots]), new_k, rtol=0, atol=step.item())
    expected = expected_attention(
        qkv, positions, cos, sin, dequantize(k_cache), dequantize(v_cache), read_slots, window
    )
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_rows_outside_the_cache_or_the_tables_are_refused_before_any_write():
    cos, sin = tables()
    qkv, positions, k_cache, v_cache, write_slots, read_slots = paged_case([5])
    before = k_cache.clone()
    bad_reads = read_slots.clone()
    bad_reads[0, 2] = 96
    with pytest.raises(RuntimeError, match="read slot outside the cache"):
        torch.ops.astrai.decode_attention(
            qkv, positions, cos, sin, k_cache, v_cache, write_slots, bad_reads, H, KVH, 0
        )
    with pytest.raises(RuntimeError, match="write slot"):
        torch.ops.astrai.decode_attention(
            qkv, positions, cos, sin, k_cache, v_cache, write_slots + 200, read_slots, H, KVH, 0
        )
    with pytest.raises(RuntimeError, match="outside the read slots"):
        torch.ops.astrai.decode_attention(
            qkv, positions + 10, cos, sin, k_cache, v_cache, write_slots, read_slots, H, KVH, 0
        )
    assert torch.equal(k_cache, before)


def test_silu_mul_is_silu_of_the_gate_times_up():
    gate_up = torch.randn(3, 40) * 4
    expected = torch.nn.functional.silu(gate_up[:, :20]) * gate_up[:, 20:]
    torch.testing.assert_close(torch.ops.astrai.silu_mul(gate_up), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16, Q8_0])
@pytest.mark.parametrize("threads", [1, 2])
def test_each_sequence_gets_the_same_bits_whatever_the_batch_around_it(
    threads: int, cache_dtype: torch.dtype
):
    """Alone, a sequence's heads are items of their own; in a batch of 4 a kv head's query
    heads go together, and from 8 whole sequences do. Every path sums in the same order."""
    dim = 64 if cache_dtype == Q8_0 else 72  # q8_0 rows are whole 32-value blocks
    cos, sin = tables(dim)
    lengths = [3, 12, 7, 1, 9, 11, 5, 2]  # 8 x 12 rows fill the 96-row cache
    qkv, positions, k_cache, v_cache, write_slots, read_slots = paged_case(lengths, seed=3, D=dim)
    k_cache, v_cache = stored(k_cache, cache_dtype), stored(v_cache, cache_dtype)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:

        def attend(rows: list[int]) -> torch.Tensor:
            return torch.ops.astrai.decode_attention(
                qkv[rows], positions[rows], cos, sin, k_cache, v_cache,
                write_slots[rows], read_slots[rows], H, KVH, 0,
            )  # fmt: skip

        alone = torch.cat([attend([b]) for b in range(len(lengths))])
        assert torch.equal(torch.cat([attend([0, 1, 2, 3]), attend([4, 5, 6, 7])]), alone)
        assert torch.equal(attend(list(range(len(lengths)))), alone)
    finally:
        torch.set_num_threads(before)
    expected = expected_attention(
        qkv, positions, cos, sin, as_float(k_cache), as_float(v_cache), read_slots, 0
    )
    torch.testing.assert_close(alone, expected, rtol=1e-5, atol=1e-5)


def long_case(lengths: list[int], seed: int, D: int = D):
    """Contexts past the kernel's 256-key chunks, rows scattered over the cache."""
    g = torch.Generator().manual_seed(seed)
    longest, slots = max(lengths), max(lengths) * len(lengths)
    k_cache, v_cache = (
        torch.randn(slots, KVH, D, generator=g),
        torch.randn(slots, KVH, D, generator=g),
    )
    order = torch.randperm(slots, generator=g)
    read_slots = torch.stack([order[i * longest : (i + 1) * longest] for i in range(len(lengths))])
    positions = torch.tensor([n - 1 for n in lengths])
    write_slots = read_slots[torch.arange(len(lengths)), positions]
    qkv = torch.randn(len(lengths), (H + 2 * KVH) * D, generator=g) * 2
    return qkv, positions, k_cache, v_cache, write_slots, read_slots


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16, Q8_0])
@pytest.mark.parametrize("window", [0, 300])
def test_long_contexts_split_in_chunks_match_torch_alone_and_in_a_batch(
    window: int, cache_dtype: torch.dtype
):
    """700 keys are three chunks merged (257 and 512 two, 256 one: the chunk edges); a long
    sequence gets the same bits alone, beside short ones and on one thread."""
    dim = 64 if cache_dtype == Q8_0 else 72
    cos, sin = tables(dim)
    cos, sin = cos.repeat(12, 1), sin.repeat(12, 1)  # positions past the 64 of the config
    lengths = [700, 5, 257, 256, 512, 30]
    qkv, positions, k_cache, v_cache, write_slots, read_slots = long_case(lengths, 4, D=dim)
    k_cache, v_cache = stored(k_cache, cache_dtype), stored(v_cache, cache_dtype)

    def attend(rows: list[int]) -> torch.Tensor:
        return torch.ops.astrai.decode_attention(
            qkv[rows], positions[rows], cos, sin, k_cache, v_cache,
            write_slots[rows], read_slots[rows], H, KVH, window,
        )  # fmt: skip

    together = attend(list(range(len(lengths))))
    alone = torch.cat([attend([b]) for b in range(len(lengths))])
    assert torch.equal(together, alone)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert torch.equal(attend(list(range(len(lengths)))), together)
    finally:
        torch.set_num_threads(before)
    expected = expected_attention(
        qkv, positions, cos, sin, as_float(k_cache), as_float(v_cache), read_slots, window
    )
    torch.testing.assert_close(together, expected, rtol=1e-5, atol=1e-5)
