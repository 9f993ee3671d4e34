"""DiskTier: full KV pages as files that outlive the process, LRU by bytes, written off-thread."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import blake2b
from pathlib import Path

import torch

from common.kv_events import DISK, BlockRemoved, BlockStored, KvEvent
from worker.kv.kv_events import PageChain
from worker.kv.page_file import (
    DIGEST_BYTES,
    SUFFIX,
    TEMP_SUFFIX,
    file_name,
    read_page,
    tensor_bytes,
    write_page,
)

log = logging.getLogger(__name__)

# Layout: `<folder>/<identity digest>/<page digest>.kv`, one subfolder per model and every
# setting that changes the cached rows (worker/kv/disk_identity.py), so a folder written
# under another model, version or setting is never read. The byte budget covers the whole
# folder, every identity's pages, least recently used first. Several workers may share the
# folder: each page is written under a temporary name and renamed, readers verify each file,
# and each worker's view of the folder's bytes is its own (a budget shared that way is kept
# approximately). A temporary file older than STALE_TEMP_S was left by a killed writer.

STALE_TEMP_S = 600.0
# Pages copied out and waiting for the writer, at most: this many bytes, or one step's pages
# where those are more (a step's pages come all at once; more would be dropped).
QUEUE_BYTES = 64 << 20


@dataclass(frozen=True)
class DiskTierStats:
    bytes_on_disk: int
    pages_written: int
    pages_read: int
    pages_dropped: int  # not written: the writer was behind, or the tier is off
    read_failures: int  # files found but refused (corrupt, truncated, foreign)


NO_DISK_TIER = DiskTierStats(0, 0, 0, 0, 0)


class DiskTier:
    def __init__(
        self, folder: Path, identity: str, page_bytes: int, budget_bytes: int, step_pages: int = 1
    ) -> None:
        """OSError when the folder cannot be made or read (`open` turns that into None);
        `step_pages`: the most pages one engine step commits."""
        self.identity = blake2b(identity.encode(), digest_size=DIGEST_BYTES).digest()
        self.root = folder
        self.dir = folder / self.identity.hex()
        self.page_bytes = page_bytes
        self.budget_bytes = budget_bytes
        self.dir.mkdir(parents=True, exist_ok=True)
        label = self.dir / "identity.txt"
        if not label.exists():  # for a person looking at the folder; never read back
            label.write_text(identity + "\n")
        self._lock = threading.Lock()
        self._files: OrderedDict[Path, int] = OrderedDict()  # oldest use first → bytes
        self._bytes = 0
        self._queued: set[bytes] = set()  # digests waiting for the writer
        # Pages this process wrote with their published chain (KV events on): their file's
        # eviction is published too. The events wait for the engine thread's take.
        self._announced: dict[Path, int] = {}
        self._events: list[KvEvent] = []
        self._scan()
        self._evict()  # a budget lowered since the last start
        self.enabled = True
        self._pages_written = self._pages_read = self._pages_dropped = self._read_failures = 0
        self._queue: queue.Queue[tuple[bytes, torch.Tensor, PageChain | None] | None] = queue.Queue(
            maxsize=max(1, step_pages, QUEUE_BYTES // max(1, page_bytes))
        )
        self._writer = threading.Thread(target=self._write_loop, name="kv-disk", daemon=True)
        self._writer.start()

    @classmethod
    def open(
        cls, folder: Path, identity: str, page_bytes: int, budget_bytes: int, step_pages: int = 1
    ) -> DiskTier | None:
        """The tier, or None (one log line) where the folder is unusable: serving goes on."""
        try:
            return cls(folder, identity, page_bytes, budget_bytes, step_pages)
        except OSError as error:
            log.warning("KV disk tier off: %s is unusable (%s)", folder, error)
            return None

    def _scan(self) -> None:
        """Every page file under the folder, oldest use first; stale temporary files go."""
        now = time.time()
        found: list[tuple[float, Path, int]] = []
        for sub in self.root.iterdir():
            if not sub.is_dir():
                continue
            for entry in os.scandir(sub):
                try:
                    info = entry.stat()
                except FileNotFoundError:  # another worker evicted it meanwhile
                    continue
                if entry.name.endswith(TEMP_SUFFIX):
                    if now - info.st_mtime > STALE_TEMP_S:
                        Path(entry.path).unlink(missing_ok=True)
                elif entry.name.endswith(SUFFIX):
                    found.append((info.st_mtime, Path(entry.path), info.st_size))
        for _, path, size in sorted(found):
            self._files[path] = size
            self._bytes += size

    # -- reading (the engine thread) -----------------------------------------------------
    def count_present(self, digests: list[bytes]) -> int:
        """How many of `digests`, from the first, have a page file."""
        if not self.enabled:
            return 0
        for i, digest in enumerate(digests):
            if not (self.dir / file_name(digest)).exists():
                return i
        return len(digests)

    def read(self, digest: bytes, into: memoryview) -> bool:
        """`into` filled with the page's payload; False for a missing or refused file (a
        refused one is deleted: its page is computed again, and written again)."""
        path = self.dir / file_name(digest)
        if read_page(path, self.identity, digest, into):
            self._pages_read += 1
            with self._lock:
                if path in self._files:
                    self._files.move_to_end(path)
            with contextlib.suppress(OSError):  # a used page, for the next start and the others
                os.utime(path)
            return True
        if path.exists():
            self._read_failures += 1
            log.warning("KV disk tier: refused %s (corrupt or foreign); computing it", path)
            self._forget(path)
        return False

    # -- writing (copied out on the engine thread, written on the tier's own) -------------
    def write(
        self,
        digest: bytes,
        copy_payload: Callable[[], torch.Tensor],
        chain: PageChain | None = None,
    ) -> None:
        """Queue a page to be written, unless it is on disk or queued already; its payload
        is copied (`copy_payload`) only then. A `chain` is published (BlockStored, medium
        DISK) once the file is written."""
        if not self.enabled or digest in self._queued or (self.dir / file_name(digest)).exists():
            return
        with self._lock:
            self._queued.add(digest)
        try:
            self._queue.put_nowait((digest, copy_payload(), chain))
        except queue.Full:
            self._pages_dropped += 1
            with self._lock:
                self._queued.discard(digest)

    def _write_loop(self) -> None:
        while (item := self._queue.get()) is not None:
            digest, payload, chain = item
            self._write_one(digest, payload, chain)
            with self._lock:
                self._queued.discard(digest)

    def _write_one(self, digest: bytes, payload: torch.Tensor, chain: PageChain | None) -> None:
        if not self.enabled:
            self._pages_dropped += 1
            return
        path = self.dir / file_name(digest)
        try:
            size = write_page(path, self.identity, digest, tensor_bytes(payload))
        except OSError as error:
            self.enabled = False  # a full disk or a folder taken away: memory only now
            log.warning("KV disk tier off: writing %s failed (%s)", path, error)
            return
        self._pages_written += 1
        with self._lock:
            self._bytes += size - self._files.pop(path, 0)
            self._files[path] = size
            if chain is not None:
                page_hash, parent, tokens = chain
                self._announced[path] = page_hash
                self._events.append(
                    BlockStored((page_hash,), parent, tokens, len(tokens), None, DISK)
                )
        self._evict()

    def _evict(self) -> None:
        while True:
            with self._lock:
                if self._bytes <= self.budget_bytes or not self._files:
                    return
                path, size = self._files.popitem(last=False)
                self._bytes -= size
                self._unannounce(path)
            path.unlink(missing_ok=True)

    def _forget(self, path: Path) -> None:
        with self._lock:
            self._bytes -= self._files.pop(path, 0)
            self._unannounce(path)
        path.unlink(missing_ok=True)

    def _unannounce(self, path: Path) -> None:
        """Under the lock: a published page's file is going."""
        page_hash = self._announced.pop(path, None)
        if page_hash is not None:
            self._events.append(BlockRemoved((page_hash,), DISK))

    def take_events(self) -> list[KvEvent]:
        """The pages written and evicted since the last take (the engine thread's)."""
        with self._lock:
            events, self._events = self._events, []
        return events

    def flush(self) -> None:
        """Until every queued page is written, the writer then running on."""
        self._queue.put(None)
        self._writer.join()
        self._writer = threading.Thread(target=self._write_loop, name="kv-disk", daemon=True)
        self._writer.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued (within `timeout_s`), then stop the writer."""
        self._queue.put(None)
        self._writer.join(timeout_s)

    def stats(self) -> DiskTierStats:
        with self._lock:
            on_disk = self._bytes
        return DiskTierStats(
            on_disk,
            self._pages_written,
            self._pages_read,
            self._pages_dropped,
            self._read_failures,
        )
