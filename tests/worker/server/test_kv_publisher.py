"""KvHistory and KvEventPublisher: numbered batches, replay, snapshots, real PUB/ROUTER sockets."""

from __future__ import annotations

import time

import msgpack
import torch
import zmq

from common.kv_events import (
    END_SEQ,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEventBatch,
    decode_batch,
    decode_seq,
    prompt_block_hashes,
    seq_bytes,
)
from tests.worker.server.fake_engine import FakeEngine, FakeScheduler
from worker.kv.base import KVStorage
from worker.kv.paged import PageCache
from worker.server.kv_history import KvHistory
from worker.server.kv_publisher import KvEventPublisher, attach_publisher, bind_addresses
from worker.server.worker_config import WorkerConfig

TOKENS = list(range(12))
H = prompt_block_hashes(TOKENS, 4)


def stored(first: int, last: int, parent: int | None) -> BlockStored:
    return BlockStored(tuple(H[first:last]), parent, tuple(TOKENS[first * 4 : last * 4]), 4)


def test_batches_are_numbered_from_0_and_replayed_from_any_kept_one():
    history = KvHistory(4, max_batches=3)
    for batch in ([AllBlocksCleared()], [stored(0, 1, None)], [stored(1, 3, H[0])]):
        history.record(KvEventBatch(1.0, tuple(batch)))
    assert history.last_seq == 2 and history.num_held == 3
    assert [seq for seq, _ in history.replay(1, now=2.0)] == [1, 2]
    assert [seq for seq, _ in history.replay(0, now=2.0)] == [0, 1, 2]
    assert history.replay(3, now=2.0) == []


def test_a_start_no_longer_kept_gets_a_snapshot_of_what_is_held():
    history = KvHistory(4, "CPU", max_batches=2)
    history.record(KvEventBatch(1.0, (AllBlocksCleared(),)))
    history.record(KvEventBatch(1.0, (stored(0, 3, None),)))
    history.record(KvEventBatch(1.0, (BlockRemoved((H[2],)),)))
    (seq, payload), *rest = history.replay(0, now=5.0)
    assert seq == 2 and rest == []
    held = BlockStored(tuple(H[:2]), None, tuple(TOKENS[:8]), 4, None, "CPU")
    assert decode_batch(payload) == KvEventBatch(5.0, (AllBlocksCleared(), held))


def test_a_large_snapshot_comes_in_parts_of_one_number():
    history = KvHistory(4, snapshot_pages=2)
    history.record(KvEventBatch(1.0, (stored(0, 3, None),)))
    parts = history.snapshot(now=1.0)
    assert [seq for seq, _ in parts] == [0, 0]
    events = [event for _, payload in parts for event in decode_batch(payload).events]
    assert events == [AllBlocksCleared(), stored(0, 2, None), stored(2, 3, H[1])]


def test_bind_addresses():
    gateway = "tcp://127.0.0.1:5557"
    auto = ("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "127.0.0.1")
    assert bind_addresses("auto", gateway) == auto
    assert bind_addresses("tcp://127.0.0.1:7000", gateway) == (
        "tcp://127.0.0.1:7000",
        "tcp://127.0.0.1:7001",
        "127.0.0.1",
    )
    # Every interface: the advertised host is the one facing the gateway.
    assert bind_addresses("tcp://0.0.0.0:0", gateway) == (
        "tcp://0.0.0.0:*",
        "tcp://0.0.0.0:*",
        "127.0.0.1",
    )


def test_no_publisher_without_a_paged_cache_or_when_off():
    config = WorkerConfig(gateways=("tcp://127.0.0.1:5557",), worker_id="w0")
    context = zmq.Context()
    try:
        assert attach_publisher(FakeEngine(), config, context) is None  # type: ignore[arg-type]
        off = WorkerConfig(gateways=("tcp://127.0.0.1:5557",), worker_id="w0", kv_events_bind="off")
        assert attach_publisher(FakeEngine(), off, context) is None  # type: ignore[arg-type]
    finally:
        context.destroy(linger=0)


class PagedEngine(FakeEngine):
    """The fake engine with a real paged cache, as attach_publisher finds it."""

    def __init__(self) -> None:
        super().__init__()
        storage = KVStorage(1, 8, 4, 1, 2, torch.float32, torch.device("cpu"))
        self.cache = PageCache(storage, 4, 64)
        self.scheduler = FakeScheduler()


def test_a_publisher_feeds_on_the_paged_cache():
    config = WorkerConfig(
        gateways=("tcp://127.0.0.1:5557",), worker_id="w0", kv_events_bind="tcp://127.0.0.1:0"
    )
    engine, context = PagedEngine(), zmq.Context()
    try:
        publisher = attach_publisher(engine, config, context)  # type: ignore[arg-type]
        assert publisher is not None
        assert engine.cache.pool.recorder is publisher.recorder
        assert engine.scheduler.flush_listeners == [publisher.flush]
        assert publisher.address.startswith("tcp://127.0.0.1:")
        assert publisher.replay_address != publisher.address
        # An address already taken: the worker serves without events.
        taken = publisher.address
        clash = WorkerConfig(
            gateways=("tcp://127.0.0.1:5557",), worker_id="w1", kv_events_bind=taken
        )
        assert attach_publisher(PagedEngine(), clash, context) is None  # type: ignore[arg-type]
        publisher.stop()
    finally:
        context.destroy(linger=0)


def receive(sock: zmq.Socket[bytes]) -> list[bytes]:
    assert sock.poll(5000), "nothing arrived"
    return sock.recv_multipart()


def test_the_publisher_sends_numbered_batches_and_answers_replays():
    context = zmq.Context()
    publisher = KvEventPublisher(context, "w0", "tcp://127.0.0.1:0", "", 4, "CPU")
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(publisher.address)
    dealer = context.socket(zmq.DEALER)
    dealer.connect(publisher.replay_address)
    try:
        time.sleep(0.3)  # the subscription reaches the PUB socket before the first batch
        publisher.start()
        topic, seq, payload = receive(sub)
        assert (topic, decode_seq(seq)) == (b"w0", 0)
        assert msgpack.unpackb(payload)[1] == [["AllBlocksCleared"]]
        publisher.recorder.stored(0, None, TOKENS[:4])
        publisher.recorder.stored(1, 0, TOKENS[4:8])
        publisher.flush()
        publisher.flush()  # nothing new: no batch
        topic, seq, payload = receive(sub)
        assert decode_seq(seq) == 1
        assert decode_batch(payload).events == (
            BlockStored(tuple(H[:2]), None, tuple(TOKENS[:8]), 4, None, "CPU"),
        )
        assert publisher.last_seq == 1
        dealer.send_multipart([b"", seq_bytes(0)])
        answers = [receive(dealer) for _ in range(3)]
        assert [decode_seq(frames[1]) for frames in answers[:2]] == [0, 1]
        assert answers[2] == [b"", END_SEQ, b""]
        dealer.send_multipart([b"", seq_bytes(2)])  # nothing newer than the last
        assert receive(dealer) == [b"", END_SEQ, b""]
    finally:
        sub.close()
        dealer.close()
        publisher.stop()
        context.destroy(linger=0)


def test_a_snapshot_lists_pages_on_disk_apart_from_those_in_memory():
    history = KvHistory(4, "CPU")
    on_disk = BlockStored((H[0], H[1]), None, tuple(TOKENS[:8]), 4, None, "DISK")
    history.record(KvEventBatch(1.0, (AllBlocksCleared(), stored(0, 2, None), on_disk)))
    history.record(KvEventBatch(1.0, (BlockRemoved((H[1],), "CPU"),)))  # memory only
    (_, payload), *_ = history.snapshot(now=2.0)
    in_memory = BlockStored((H[0],), None, tuple(TOKENS[:4]), 4, None, "CPU")
    assert decode_batch(payload).events == (AllBlocksCleared(), in_memory, on_disk)
    history.record(KvEventBatch(1.0, (BlockRemoved((H[0], H[1]), "DISK"),)))
    (_, payload), *_ = history.snapshot(now=3.0)
    assert decode_batch(payload).events == (AllBlocksCleared(), in_memory)
