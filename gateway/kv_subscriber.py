"""KvSubscriber: follows every registered worker's KV-event stream into the KvIndex."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import zmq
import zmq.asyncio

from common.kv_events import (
    END_SEQ,
    MAX_EVENT_FRAME_BYTES,
    KvEventBatch,
    KvEventError,
    decode_batch,
    decode_seq,
    seq_bytes,
)
from common.wire import DropCounter
from gateway.kv_index import Applied, KvIndex
from gateway.registry import WorkerRegistry

log = logging.getLogger(__name__)
WATCH_S = 0.2  # how often the registry is checked for workers to follow or drop
CHECK_S = 1.0  # an idle stream is checked against the heartbeats' sequence number this often
REPLAY_TIMEOUT_S = 2.0  # a replay socket silent this long does not answer
MAX_BACKOFF_S = 5.0


class KvSubscriber:
    """One task per worker with an event address: a SUB socket on its events, a DEALER to
    its replay socket when out of step.

    Every frame is checked: [topic, 8-byte sequence number, payload], the topic being the
    worker's own id (another id on its socket is a worker claiming pages it does not own:
    `kv_foreign`), the payload a well-formed batch (`kv_malformed`), the number the next one
    (`kv_replayed` at or below the last applied, `kv_gap` past the next: a resync). A
    stream silent while the worker's heartbeats say it published more (twice in a row:
    `kv_missed`), or events that contradict the state (`kv_inconsistent`), resync too. A
    replay socket that does not answer (`kv_replay_timeout`) is asked again, backing off.
    The counts are the hub's dropped-frame counts, in /stats and /metrics.
    """

    def __init__(self, registry: WorkerRegistry, index: KvIndex, drops: DropCounter) -> None:
        self.registry = registry
        self.index = index
        self.drops = drops
        self.replay_timeout_s = REPLAY_TIMEOUT_S
        self._context: zmq.asyncio.Context | None = None
        self._followed: dict[str, tuple[tuple[str, str, str], asyncio.Task[None]]] = {}
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._context = zmq.asyncio.Context()
        self._watcher = asyncio.create_task(self._watch(), name="kv-events-watch")

    async def stop(self) -> None:
        tasks = [task for _, task in self._followed.values()]
        if self._watcher is not None:
            tasks.append(self._watcher)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._followed.clear()
        if self._context is not None:
            self._context.destroy(linger=0)

    def describe(self) -> dict[str, dict[str, object]]:
        """Per followed worker: pages held (in memory, on disk), the last batch applied,
        whether in step."""
        described: dict[str, dict[str, object]] = {}
        for worker_id in self._followed:
            pages = self.index.get(worker_id)
            if pages is not None:
                described[worker_id] = {
                    "pages": len(pages.held),
                    "pages_on_disk": len(pages.on_disk),
                    "last_seq": pages.last_seq,
                    "in_step": pages.in_step,
                }
        return described

    def forget(self, worker_id: str) -> None:
        """The worker is gone: stop following it and drop what it held."""
        followed = self._followed.pop(worker_id, None)
        if followed is not None:
            followed[1].cancel()
        self.index.forget(worker_id)

    async def _watch(self) -> None:
        while True:
            workers = {w.worker_id: w for w in self.registry.all()}
            for worker_id in [w for w in self._followed if w not in workers]:
                self.forget(worker_id)
            for worker_id, w in workers.items():
                key = (w.incarnation, w.kv_events, w.kv_replay)
                followed = self._followed.get(worker_id)
                if followed is not None and followed[0] == key:
                    continue
                self.forget(worker_id)
                if w.kv_events and w.kv_replay:
                    self.index.track(worker_id, w.page_size)
                    task = asyncio.create_task(
                        self._follow(worker_id, w.kv_events, w.kv_replay),
                        name=f"kv-events-{worker_id}",
                    )
                    self._followed[worker_id] = (key, task)
            await asyncio.sleep(WATCH_S)

    async def _follow(self, worker_id: str, events: str, replay: str) -> None:
        assert self._context is not None
        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.MAXMSGSIZE, MAX_EVENT_FRAME_BYTES)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(events)
        backoff = 0.0
        seen_behind = False
        try:
            while True:
                pages = self.index.get(worker_id)
                if pages is not None and not pages.in_step:
                    if await self._resync(worker_id, replay):
                        backoff = 0.0
                    else:
                        backoff = min(MAX_BACKOFF_S, backoff * 2 or 0.25)
                        await asyncio.sleep(backoff)
                        continue
                if await sub.poll(int(CHECK_S * 1000)):
                    self._receive(worker_id, await sub.recv_multipart())
                    seen_behind = False
                elif self._behind(worker_id):
                    if seen_behind:
                        self.drops.counts["kv_missed"] += 1
                        self.index.mark_out_of_step(worker_id)
                    seen_behind = not seen_behind
                else:
                    seen_behind = False
        finally:
            sub.close()

    def _behind(self, worker_id: str) -> bool:
        worker, pages = self.registry.get(worker_id), self.index.get(worker_id)
        if worker is None or pages is None:
            return False
        return worker.kv_events_seq > (-1 if pages.last_seq is None else pages.last_seq)

    def _receive(self, worker_id: str, frames: list[bytes]) -> None:
        if len(frames) != 3:
            self.drops.counts["kv_framing"] += 1
            return
        topic, seq_frame, payload = frames
        if topic != worker_id.encode():
            log.warning("KV events for %r on the socket of worker %s", topic[:64], worker_id)
            self.drops.counts["kv_foreign"] += 1
            return
        try:
            seq, batch = decode_seq(seq_frame), decode_batch(payload)
        except KvEventError as exc:
            log.warning("KV events of worker %s dropped: %s", worker_id, exc)
            self.drops.counts[exc.reason] += 1
            return
        self._apply(worker_id, seq, batch)

    def _apply(self, worker_id: str, seq: int, batch: KvEventBatch) -> Applied:
        result = self.index.apply(worker_id, seq, batch)
        if result is Applied.REPLAYED:
            self.drops.counts["kv_replayed"] += 1
        elif result is Applied.GAP:
            self.drops.counts["kv_gap"] += 1
        elif result is Applied.INCONSISTENT:
            log.warning("KV events of worker %s contradict its pages; resyncing", worker_id)
            self.drops.counts["kv_inconsistent"] += 1
        return result

    async def _resync(self, worker_id: str, replay: str) -> bool:
        """Ask the replay socket for every batch after the last applied (or a snapshot);
        True once the index is in step."""
        pages = self.index.get(worker_id)
        if pages is None:
            return False
        start = 0 if pages.last_seq is None else pages.last_seq + 1
        answers = await self._ask_replay(worker_id, replay, start)
        if answers is None:
            return False
        for seq, batch in answers:
            if self._apply(worker_id, seq, batch) in (Applied.GAP, Applied.INCONSISTENT):
                return False
        self.index.mark_in_step(worker_id)
        pages = self.index.get(worker_id)
        return pages is not None and pages.in_step

    async def _ask_replay(
        self, worker_id: str, replay: str, start: int
    ) -> list[tuple[int, KvEventBatch]] | None:
        """The answer's batches, those of one number (a snapshot's parts) joined; None when
        the socket does not answer in time or answers with a malformed frame."""
        assert self._context is not None
        dealer = self._context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.MAXMSGSIZE, MAX_EVENT_FRAME_BYTES)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(replay)
        answers: list[tuple[int, KvEventBatch]] = []
        try:
            await dealer.send_multipart([b"", seq_bytes(start)])
            while True:
                if not await dealer.poll(int(self.replay_timeout_s * 1000)):
                    log.warning("KV replay socket of worker %s did not answer", worker_id)
                    self.drops.counts["kv_replay_timeout"] += 1
                    return None
                frames = await dealer.recv_multipart()
                if len(frames) != 3 or frames[0] != b"":
                    self.drops.counts["kv_framing"] += 1
                    return None
                if frames[1] == END_SEQ:
                    return answers
                seq, batch = decode_seq(frames[1]), decode_batch(frames[2])
                if answers and answers[-1][0] == seq:
                    joined = answers[-1][1].events + batch.events
                    answers[-1] = (seq, KvEventBatch(batch.ts, joined))
                else:
                    answers.append((seq, batch))
        except KvEventError as exc:
            log.warning("KV replay of worker %s dropped: %s", worker_id, exc)
            self.drops.counts[exc.reason] += 1
            return None
        finally:
            dealer.close()
