"""KvSubscriber against a scripted publisher over real ZeroMQ sockets: replay, gaps, bad input."""

import asyncio
import time

import zmq
import zmq.asyncio

from common.kv_events import (
    END_SEQ,
    AllBlocksCleared,
    BlockStored,
    KvEventBatch,
    decode_seq,
    encode_batch,
    prompt_block_hashes,
    seq_bytes,
)
from common.ports import free_loopback_port
from common.schemas import Heartbeat, Register
from common.wire import DropCounter
from gateway.kv_index import KvIndex
from gateway.kv_subscriber import KvSubscriber
from gateway.registry import WorkerRegistry

H = prompt_block_hashes(list(range(8)), 4)
CLEAN = KvEventBatch(0.0, (AllBlocksCleared(),))
FIRST = KvEventBatch(0.0, (BlockStored((H[0],), None, (0, 1, 2, 3), 4),))
SECOND = KvEventBatch(0.0, (BlockStored((H[1],), H[0], (4, 5, 6, 7), 4),))


class ScriptedPublisher:
    """A worker's two event sockets, driven by the test."""

    def __init__(self, context: zmq.asyncio.Context, worker_id: str = "w0") -> None:
        self.topic = worker_id.encode()
        self.pub = context.socket(zmq.PUB)
        self.pub.bind("tcp://127.0.0.1:*")
        self.replay = context.socket(zmq.ROUTER)
        self.replay.bind("tcp://127.0.0.1:*")
        self.address = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.replay_address = self.replay.getsockopt_string(zmq.LAST_ENDPOINT)

    async def publish(self, seq: int, batch: KvEventBatch, topic: bytes | None = None) -> None:
        await self.pub.send_multipart([topic or self.topic, seq_bytes(seq), encode_batch(batch)])

    async def answer_replay(self, answers: list[tuple[int, KvEventBatch]]) -> int:
        """Wait for a replay request, answer it; the sequence number it asked from."""
        identity, empty, start = await asyncio.wait_for(self.replay.recv_multipart(), 10)
        assert empty == b""
        for seq, batch in answers:
            await self.replay.send_multipart([identity, b"", seq_bytes(seq), encode_batch(batch)])
        await self.replay.send_multipart([identity, b"", END_SEQ, b""])
        return decode_seq(start)


def register(registry, events: str, replay: str, worker_id: str = "w0") -> None:
    message = Register(worker_id, "a", "m", 512, 4, 100, 4, 1, "h", (), events, replay)
    registry.register(worker_id.encode(), message, time.monotonic())


async def eventually(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def started():
    context = zmq.asyncio.Context()
    registry, index, drops = WorkerRegistry(), KvIndex(), DropCounter()
    subscriber = KvSubscriber(registry, index, drops)
    subscriber.replay_timeout_s = 0.3
    await subscriber.start()
    return context, registry, index, drops, subscriber


async def in_step_at_1(context, registry, index, subscriber):
    """A followed worker, synced by a replay from 0, its SUB socket settled."""
    publisher = ScriptedPublisher(context)
    register(registry, publisher.address, publisher.replay_address)
    assert await publisher.answer_replay([(0, CLEAN), (1, FIRST)]) == 0
    await eventually(lambda: index.get("w0") is not None and index.get("w0").in_step)
    await asyncio.sleep(0.3)  # the subscription reaches the PUB socket
    return publisher


async def stop(context, subscriber):
    await subscriber.stop()
    context.destroy(linger=0)


async def test_a_worker_is_followed_from_a_replay_then_live():
    context, registry, index, drops, subscriber = await started()
    try:
        publisher = await in_step_at_1(context, registry, index, subscriber)
        assert index.match("w0", H, now=0.0) == 1
        await publisher.publish(2, SECOND)
        await eventually(lambda: index.match("w0", H, now=0.0) == 2)
        assert subscriber.describe() == {
            "w0": {"pages": 2, "pages_on_disk": 0, "last_seq": 2, "in_step": True}
        }
        assert not drops.counts
    finally:
        await stop(context, subscriber)


async def test_a_gap_resyncs_from_the_first_missing_batch():
    context, registry, index, drops, subscriber = await started()
    try:
        publisher = await in_step_at_1(context, registry, index, subscriber)
        await publisher.publish(3, SECOND)  # batch 2 never arrived
        snapshot = KvEventBatch(0.0, (AllBlocksCleared(), *FIRST.events))
        assert await publisher.answer_replay([(3, snapshot), (3, SECOND)]) == 2
        await eventually(lambda: index.get("w0").last_seq == 3 and index.get("w0").in_step)
        assert index.match("w0", H, now=0.0) == 2  # a snapshot's parts, joined
        assert drops.counts["kv_gap"] == 1
    finally:
        await stop(context, subscriber)


async def test_bad_frames_are_counted_and_the_stream_goes_on():
    context, registry, index, drops, subscriber = await started()
    try:
        publisher = await in_step_at_1(context, registry, index, subscriber)
        await publisher.publish(2, SECOND, topic=b"w1")  # w1's pages on w0's socket
        await publisher.pub.send_multipart([b"w0", seq_bytes(2), b"\xc1"])
        await publisher.pub.send_multipart([b"w0", seq_bytes(2)])
        await publisher.pub.send_multipart([b"w0", b"\x02", encode_batch(SECOND)])
        await publisher.publish(1, FIRST)  # a replay of what was applied
        await eventually(lambda: sum(drops.counts.values()) == 5)
        assert dict(drops.counts) == {
            "kv_foreign": 1,
            "kv_malformed": 1,
            "kv_framing": 2,
            "kv_replayed": 1,
        }
        assert index.match("w0", H, now=0.0) == 1
        await publisher.publish(2, SECOND)
        await eventually(lambda: index.match("w0", H, now=0.0) == 2)
    finally:
        await stop(context, subscriber)


async def test_a_replay_socket_that_does_not_answer_is_counted_and_asked_again():
    context, registry, index, drops, subscriber = await started()
    try:
        silent = f"tcp://127.0.0.1:{free_loopback_port()}"
        register(registry, silent, silent)
        await eventually(lambda: drops.counts["kv_replay_timeout"] >= 2)
        assert not index.get("w0").in_step
        assert index.match("w0", H, now=0.0) == 0
    finally:
        await stop(context, subscriber)


async def test_a_batch_lost_at_the_end_is_caught_from_the_heartbeats():
    context, registry, index, drops, subscriber = await started()
    try:
        publisher = await in_step_at_1(context, registry, index, subscriber)
        # The worker says it published batch 2, which never came: after two idle checks
        # the subscriber asks for it.
        beat = Heartbeat("w0", "a", 0, 0, 100, 100, 0, None, False, kv_events_seq=2)
        registry.heartbeat(beat, time.monotonic())
        assert await publisher.answer_replay([(2, SECOND)]) == 2
        await eventually(lambda: index.match("w0", H, now=0.0) == 2)
        assert drops.counts["kv_missed"] == 1
    finally:
        await stop(context, subscriber)


async def test_a_worker_that_leaves_is_forgotten():
    context, registry, index, _, subscriber = await started()
    try:
        await in_step_at_1(context, registry, index, subscriber)
        registry.remove("w0")
        await eventually(lambda: "w0" not in index)
        assert subscriber.describe() == {}
    finally:
        await stop(context, subscriber)
