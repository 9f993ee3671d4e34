"""ModelRunner's batches: the decode shortcut builds exactly what the general packing does."""

import torch

from tests.worker.stack_factory import TINY, tiny_model
from worker.engine.runner import ModelRunner
from worker.engine.step_plan import Chunk
from worker.kv.base import KVStorage
from worker.kv.paged import PageCache


def runner_with_sequences(lengths: list[int], page_size: int = 4) -> ModelRunner:
    storage = KVStorage(
        TINY.num_layers,
        32,
        page_size,
        TINY.num_kv_heads,
        TINY.head_dim,
        torch.float32,
        torch.device("cpu"),
    )
    cache = PageCache(storage, page_size, TINY.max_position_embeddings, False, watermark=0.0)
    for seq_id, length in enumerate(lengths):
        assert cache.admit(seq_id, list(range(length))) is not None
        assert cache.grow(seq_id, length + 1)
    return ModelRunner(tiny_model(), cache)


def test_the_decode_batch_equals_the_packed_batch():
    lengths = [5, 1, 9]  # context before the new token; pages of 4 rows
    runner = runner_with_sequences(lengths)
    chunks = [
        Chunk(seq_id, start, [7 + seq_id], wants_logits=seq_id != 1)
        for seq_id, start in enumerate(lengths)
    ]
    fast_ids, fast = runner.build_batch(chunks)
    packed_ids, packed = runner._packed_batch(chunks, [1, 1, 1])
    assert torch.equal(fast_ids, packed_ids)
    for name in ("positions", "write_slots", "read_slots", "mask", "logits_index"):
        assert torch.equal(getattr(fast, name), getattr(packed, name)), name
        assert getattr(fast, name).dtype == getattr(packed, name).dtype, name
    assert (fast.query_index, fast.max_query_len, fast.seq_lengths) == (None, 1, None)


def test_a_one_token_prompt_chunk_takes_the_prefill_not_the_decode_step():
    """A prompt whose other pages were cached feeds its last token alone: it still gets the
    prefill's per-sequence attention, so its logits are the bits a whole prefill gives."""
    runner = runner_with_sequences([5, 9])
    decode = Chunk(0, 5, [7], wants_logits=True)
    prompt = Chunk(1, 9, [8], wants_logits=True, prompt=True)
    _, alone = runner.build_batch([prompt])
    assert (alone.max_query_len, alone.seq_lengths) == (1, ((1, 10),))
    _, mixed = runner.build_batch([decode, prompt])
    assert mixed.seq_lengths == ((1, 6), (1, 10))
    _, decoding = runner.build_batch([decode])
    assert decoding.seq_lengths is None
