"""KV events on the wire: vLLM's array-like layout, the page hash, and every malformed shape."""

import hashlib
import struct

import msgpack
import pytest

from common.kv_events import (
    END_SEQ,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEventBatch,
    KvEventError,
    block_hash,
    decode_batch,
    decode_seq,
    encode_batch,
    prompt_block_hashes,
    seq_bytes,
)


def test_block_hash_is_sha256_of_the_parent_and_the_tokens_big_endian():
    data = (7).to_bytes(8, "big") + b"".join(t.to_bytes(4, "big") for t in (1, 2, 70000))
    expected = int.from_bytes(hashlib.sha256(data).digest()[:8], "big")
    assert block_hash(7, [1, 2, 70000]) == expected
    first = struct.pack(">Q2I", 0, 5, 6)
    assert block_hash(None, [5, 6]) == int.from_bytes(hashlib.sha256(first).digest()[:8], "big")


def test_prompt_hashes_chain_over_full_pages_only():
    tokens = list(range(10))
    h1 = block_hash(None, [0, 1, 2, 3])
    h2 = block_hash(h1, [4, 5, 6, 7])
    assert prompt_block_hashes(tokens, 4) == [h1, h2]  # tokens 8, 9: a partial page
    assert prompt_block_hashes(tokens[:3], 4) == []
    # The same page after another prefix hashes differently.
    assert prompt_block_hashes([9, 9, 9, 9, 4, 5, 6, 7], 4)[1] != h2


def test_a_batch_is_vllm_array_like_layout():
    batch = KvEventBatch(
        1.5,
        (
            BlockStored((11, 12), None, (1, 2, 3, 4), 2, None, "CPU"),
            BlockRemoved((12,), "CPU"),
            AllBlocksCleared(),
        ),
    )
    raw = msgpack.unpackb(encode_batch(batch))
    assert raw == [
        1.5,
        [
            ["BlockStored", [11, 12], None, [1, 2, 3, 4], 2, None, "CPU"],
            ["BlockRemoved", [12], "CPU"],
            ["AllBlocksCleared"],
        ],
    ]
    assert decode_batch(encode_batch(batch)) == batch


def test_full_64_bit_hashes_round_trip():
    big = (1 << 64) - 1
    batch = KvEventBatch(0.0, (BlockStored((big,), big - 1, (1,), 1),))
    assert decode_batch(encode_batch(batch)) == batch


def test_fields_a_newer_publisher_appends_are_ignored():
    # vLLM now appends lora_name, extra_keys, … and the batch's data_parallel_rank.
    stored = ["BlockStored", [5], 4, [1, 2], 2, None, "GPU", None, None]
    raw = [2.0, [stored, ["BlockRemoved", [5], "GPU", 0]], 0]
    assert decode_batch(msgpack.packb(raw)) == KvEventBatch(
        2.0, (BlockStored((5,), 4, (1, 2), 2, None, "GPU"), BlockRemoved((5,), "GPU"))
    )


def test_older_publishers_without_medium_decode():
    raw = [1, [["BlockStored", [5], None, [1, 2], 2], ["BlockRemoved", [5]]]]
    batch = decode_batch(msgpack.packb(raw))
    assert batch.events == (BlockStored((5,), None, (1, 2), 2), BlockRemoved((5,)))


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # never valid msgpack
        msgpack.packb({"ts": 1, "events": []}),  # a map, not vLLM's array layout
        msgpack.packb([1.0]),
        msgpack.packb(["now", []]),
        msgpack.packb([True, []]),
        msgpack.packb([1.0, [["BlockStored", [1], None, [1], 2]]]),  # tokens don't fill a page
        msgpack.packb([1.0, [["BlockStored", [], None, [], 2]]]),  # no hashes
        msgpack.packb([1.0, [["BlockStored", [-1], None, [1, 2], 2]]]),  # negative hash
        msgpack.packb([1.0, [["BlockStored", [True], None, [1, 2], 2]]]),  # bool as hash
        msgpack.packb([1.0, [["BlockStored", [1], None, [1, "2"], 2]]]),
        msgpack.packb([1.0, [["BlockStored", [1], None, [1, 2], 0]]]),  # block size 0
        msgpack.packb([1.0, [["BlockStored", [1], None, [1, 2], 2, "lora"]]]),
        msgpack.packb([1.0, [["BlockStored", [1], None, [1, 2], 2, None, 5]]]),
        msgpack.packb([1.0, [["BlockStored", [1], None]]]),  # too few fields
        msgpack.packb([1.0, [["BlockRemoved"]]]),
        msgpack.packb([1.0, [["BlockEvicted", [1]]]]),  # unknown type
        msgpack.packb([1.0, [[]]]),
        msgpack.packb([1.0, ["BlockStored"]]),
    ],
)
def test_malformed_batches_are_refused_as_malformed(payload):
    with pytest.raises(KvEventError) as refused:
        decode_batch(payload)
    assert refused.value.reason == "kv_malformed"


def test_sequence_numbers_are_8_bytes_big_endian_signed():
    assert seq_bytes(258) == b"\x00\x00\x00\x00\x00\x00\x01\x02"
    assert decode_seq(seq_bytes(258)) == 258
    assert decode_seq(END_SEQ) == -1
    with pytest.raises(KvEventError) as refused:
        decode_seq(b"\x01\x02")
    assert refused.value.reason == "kv_framing"
