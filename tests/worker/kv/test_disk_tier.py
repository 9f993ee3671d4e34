"""The KV disk tier: page files refused unless whole and theirs, LRU by bytes, a tier that
turns itself off; and a PageCache that reads a prompt's pages back from another's folder."""

from __future__ import annotations

import errno
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from unittest import mock

import pytest
import torch

import worker.kv.disk_tier
from common.kv_events import DISK, BlockRemoved, BlockStored, prompt_block_hashes
from worker.kv.base import Admission, KVStorage
from worker.kv.disk_tier import QUEUE_BYTES, STALE_TEMP_S, DiskTier, DiskTierStats
from worker.kv.kv_events import KvEventRecorder
from worker.kv.page_file import (
    HEADER,
    file_name,
    prompt_digests,
    read_page,
    tensor_bytes,
    write_page,
)
from worker.kv.paged import PageCache

PS = 4
IDENTITY = "tiny model|float32"
ID = b"i" * 16
DIGEST = b"d" * 16


def payload(value: float, n: int = 8) -> torch.Tensor:
    return torch.full((n,), value, dtype=torch.float32)


def read_back(path: Path, identity: bytes = ID, digest: bytes = DIGEST, n: int = 8) -> bool:
    return read_page(path, identity, digest, memoryview(bytearray(4 * n)))


# -- one page file ------------------------------------------------------------------------


def test_a_page_file_reads_back_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "p.kv"
    assert write_page(path, ID, DIGEST, tensor_bytes(payload(1.5))) == HEADER.size + 32
    into = torch.empty(8)
    assert read_page(path, ID, DIGEST, tensor_bytes(into))
    assert torch.equal(into, payload(1.5))
    assert [p.name for p in tmp_path.iterdir()] == ["p.kv"]  # no temporary file left


def test_a_page_file_of_another_identity_page_or_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.kv"
    write_page(path, ID, DIGEST, tensor_bytes(payload(1.0)))
    assert not read_back(path, identity=b"j" * 16)
    assert not read_back(path, digest=b"e" * 16)
    assert not read_back(path, n=7)
    assert not read_back(tmp_path / "missing.kv")


@pytest.mark.parametrize("damage", ["truncated", "flipped", "longer", "header only"])
def test_a_damaged_page_file_is_refused(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "p.kv"
    write_page(path, ID, DIGEST, tensor_bytes(payload(1.0)))
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:-1]
    elif damage == "flipped":
        data[-3] ^= 0x10
    elif damage == "longer":
        data += b"\0"
    else:
        data = data[: HEADER.size]
    path.write_bytes(bytes(data))
    assert not read_back(path)


def test_a_failed_write_leaves_no_file_under_either_name(tmp_path: Path) -> None:
    path = tmp_path / "p.kv"
    full = OSError(errno.ENOSPC, "No space left on device")
    with mock.patch("os.write", side_effect=full), pytest.raises(OSError):
        write_page(path, ID, DIGEST, tensor_bytes(payload(1.0)))
    assert list(tmp_path.iterdir()) == []


def test_digests_chain_over_every_earlier_page() -> None:
    first = prompt_digests([1, 2, 3, 4, 5, 6, 7, 8], 2, PS)
    other_start = prompt_digests([9, 2, 3, 4, 5, 6, 7, 8], 2, PS)
    assert len(set(first + other_start)) == 4  # the same second page after another first
    assert prompt_digests([1, 2, 3, 4, 5, 6, 7, 8, 9], 2, PS) == first


# -- the tier -----------------------------------------------------------------------------


def tier(folder: Path, budget: int = 1 << 20, identity: str = IDENTITY) -> DiskTier:
    made = DiskTier.open(folder, identity, 32, budget)
    assert made is not None
    return made


def names(tier: DiskTier) -> list[str]:
    return sorted(p.name for p in tier.dir.glob("*.kv"))


@pytest.mark.parametrize(("step_pages", "dropped"), [(6, False), (1, True)])
def test_a_step_s_pages_wait_for_a_busy_writer_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step_pages: int, dropped: bool
) -> None:
    """A step commits its pages at once: the queue holds `step_pages` of them while the writer
    is busy even where its byte bound (here one page) holds fewer; past that, they drop."""
    go_on = threading.Event()
    write_one = DiskTier._write_one

    def busy(self: DiskTier, *args: object) -> None:
        go_on.wait(10)
        write_one(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(DiskTier, "_write_one", busy)
    disk = DiskTier.open(tmp_path, IDENTITY, QUEUE_BYTES, 1 << 30, step_pages)
    assert disk is not None
    for n in range(6):
        disk.write(bytes([n + 1]) * 16, partial(payload, float(n)))
    go_on.set()
    disk.flush()
    stats = disk.stats()
    assert (stats.pages_dropped > 0) == dropped
    assert stats.pages_written + stats.pages_dropped == 6


def test_pages_over_the_budget_go_least_recently_used_first(tmp_path: Path) -> None:
    disk = tier(tmp_path, budget=2 * (HEADER.size + 32))
    a, b, c = (bytes([n]) * 16 for n in (1, 2, 3))
    disk.write(a, lambda: payload(1.0))
    disk.write(b, lambda: payload(2.0))
    disk.flush()
    assert disk.read(a, tensor_bytes(torch.empty(8)))  # a is used: b is now the oldest
    disk.write(c, lambda: payload(3.0))
    disk.flush()
    assert names(disk) == sorted([file_name(a), file_name(c)])
    stats = disk.stats()
    assert (stats.bytes_on_disk, stats.pages_written, stats.pages_read) == (
        2 * (HEADER.size + 32),
        3,
        1,
    )
    disk.close()


def test_a_start_under_a_lower_budget_keeps_the_most_recently_used_pages(tmp_path: Path) -> None:
    first = tier(tmp_path)
    digests = [bytes([n]) * 16 for n in (1, 2, 3)]
    for age, digest in enumerate(digests):
        first.write(digest, lambda: payload(1.0))
        first.flush()
        used = time.time() - 100 + age  # written in that order, a second apart
        os.utime(first.dir / file_name(digest), (used, used))
    first.close()
    second = tier(tmp_path, budget=2 * (HEADER.size + 32))
    assert names(second) == sorted(file_name(d) for d in digests[1:])
    second.close()


def test_a_page_on_disk_or_queued_is_not_copied_again(tmp_path: Path) -> None:
    disk = tier(tmp_path)
    copies: list[int] = []

    def copy() -> torch.Tensor:
        copies.append(1)
        return payload(1.0)

    disk.write(DIGEST, copy)
    disk.flush()
    disk.write(DIGEST, copy)
    assert len(copies) == 1 and disk.stats().pages_written == 1
    disk.close()


def test_a_new_tier_finds_its_predecessors_pages_and_budget(tmp_path: Path) -> None:
    first = tier(tmp_path)
    first.write(DIGEST, lambda: payload(4.0))
    first.close()
    second = tier(tmp_path)
    assert second.count_present([DIGEST, b"x" * 16]) == 1
    into = torch.empty(8)
    assert second.read(DIGEST, tensor_bytes(into)) and torch.equal(into, payload(4.0))
    assert second.stats().bytes_on_disk == HEADER.size + 32
    other = tier(tmp_path, identity="another model|float32")
    assert other.count_present([DIGEST]) == 0  # its own subfolder
    assert other.stats().bytes_on_disk == HEADER.size + 32  # the budget is the folder's
    second.close()
    other.close()


def test_a_corrupt_page_is_refused_deleted_and_counted(tmp_path: Path) -> None:
    disk = tier(tmp_path)
    disk.write(DIGEST, lambda: payload(1.0))
    disk.flush()
    path = disk.dir / file_name(DIGEST)
    path.write_bytes(path.read_bytes()[:-4])
    assert not disk.read(DIGEST, tensor_bytes(torch.empty(8)))
    assert not path.exists()
    assert disk.stats().read_failures == 1 and disk.stats().bytes_on_disk == 0
    disk.close()


def test_a_foreign_file_under_a_pages_name_is_refused(tmp_path: Path) -> None:
    disk = tier(tmp_path)
    other = tier(tmp_path / "elsewhere", identity="another model")
    other.write(DIGEST, lambda: payload(1.0))
    other.flush()
    (other.dir / file_name(DIGEST)).rename(disk.dir / file_name(DIGEST))
    assert disk.count_present([DIGEST]) == 1
    assert not disk.read(DIGEST, tensor_bytes(torch.empty(8)))
    disk.close()
    other.close()


def test_stale_temporary_files_go_at_start_and_fresh_ones_stay(tmp_path: Path) -> None:
    disk = tier(tmp_path)
    disk.close()
    stale, fresh = disk.dir / ".a.kv.1.2.tmp", disk.dir / ".b.kv.1.2.tmp"
    stale.write_bytes(b"half a page")
    fresh.write_bytes(b"being written")
    old = time.time() - STALE_TEMP_S - 1
    os.utime(stale, (old, old))
    tier(tmp_path).close()
    assert not stale.exists() and fresh.exists()


def test_an_unusable_folder_means_no_tier(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert DiskTier.open(blocker / "kv", IDENTITY, 32, 1 << 20) is None


def test_a_failing_disk_turns_the_tier_off_and_nothing_else(tmp_path: Path) -> None:
    disk = tier(tmp_path)
    full = OSError(errno.ENOSPC, "No space left on device")
    with mock.patch.object(worker.kv.disk_tier, "write_page", side_effect=full):
        disk.write(DIGEST, lambda: payload(1.0))
        disk.flush()
    assert not disk.enabled
    disk.write(b"e" * 16, lambda: payload(1.0))
    assert disk.count_present([DIGEST]) == 0
    assert disk.stats().pages_written == 0
    disk.close()


# -- a PageCache over the tier -------------------------------------------------------------

PROMPT = list(range(100, 114))  # 3 full pages and 2 tokens


def disk_cache(folder: Path, num_pages: int = 8, identity: str = IDENTITY) -> PageCache:
    storage = KVStorage(2, num_pages, PS, 1, 2, torch.float32, torch.device("cpu"))
    page_bytes = 2 * 2 * PS * 1 * 2 * 4
    disk = DiskTier.open(folder, identity, page_bytes, 1 << 20)
    return PageCache(storage, PS, 64, watermark=0.0, disk=disk)


def disk_stats(cache: PageCache) -> DiskTierStats:
    stats = cache.stats().disk
    assert stats is not None
    return stats


def compute_prompt(cache: PageCache, seq_id: int, tokens: Sequence[int]) -> Admission:
    """Admit, write each computed row as the token it holds (k) and its negative (v) in
    every layer, commit, release."""
    admission = cache.admit(seq_id, tokens)
    assert admission is not None
    cache.begin_step()
    start = cache.shared_ready(seq_id, admission.num_cached_tokens)
    assert start is not None
    cache.plan(seq_id, start, len(tokens))
    for position, slot in enumerate(cache.slots(seq_id, start, len(tokens)), start=start):
        for k, v in cache.layer_views():
            k[slot], v[slot] = tokens[position], -tokens[position]
    cache.commit(seq_id, tokens, len(tokens))
    return admission


def rows_of(cache: PageCache, seq_id: int, end: int) -> list[float]:
    slots = cache.slots(seq_id, 0, end)
    return [
        float(k[slot].mean() - v[slot].mean()) / 2 for k, v in cache.layer_views() for slot in slots
    ]


def test_a_restarted_cache_reads_a_prompts_pages_back_from_disk(tmp_path: Path) -> None:
    first = disk_cache(tmp_path)
    compute_prompt(first, 1, PROMPT)
    first.release(1)
    first.close()
    assert disk_stats(first).pages_written == 3

    second = disk_cache(tmp_path)
    asked = [*PROMPT[:12], 7, 8, 9]  # the same 3 pages, then other tokens
    assert second.admit(1, asked) == Admission(12, 12)
    assert rows_of(second, 1, 12) == [float(t) for t in PROMPT[:12]] * 2
    stats = second.stats()
    assert (stats.hit_tokens, stats.disk_hit_tokens, disk_stats(second).pages_read) == (12, 12, 3)
    # Read back, they are the memory tier's again: a second prompt shares them there.
    second.release(1)
    assert second.admit(2, asked) == Admission(12, 12)
    assert second.stats().disk_hit_tokens == 12
    second.close()


def test_pages_in_memory_then_on_disk_are_found_in_that_order(tmp_path: Path) -> None:
    writer = disk_cache(tmp_path)
    compute_prompt(writer, 1, PROMPT)
    writer.close()
    cache = disk_cache(tmp_path)
    compute_prompt(cache, 1, [*PROMPT[:4], 1, 2])  # page 0 computed here, in memory
    cache.release(1)
    assert cache.stats().disk_hit_tokens == 4  # it read page 0 back already
    assert cache.admit(2, PROMPT) == Admission(12, 12)
    assert cache.stats().disk_hit_tokens == 12  # pages 1 and 2 from disk, page 0 in memory
    assert rows_of(cache, 2, 12) == [float(t) for t in PROMPT[:12]] * 2
    cache.close()


def test_another_models_pages_are_never_read(tmp_path: Path) -> None:
    writer = disk_cache(tmp_path)
    compute_prompt(writer, 1, PROMPT)
    writer.close()
    other = disk_cache(tmp_path, identity="another model|float32")
    assert other.admit(1, PROMPT) == Admission(0, 0)
    other.close()


def test_a_corrupt_page_is_computed_again_and_written_again(tmp_path: Path) -> None:
    writer = disk_cache(tmp_path)
    compute_prompt(writer, 1, PROMPT)
    writer.close()
    assert writer.disk is not None
    digests = prompt_digests(PROMPT, 3, PS)
    broken = writer.disk.dir / file_name(digests[1])
    broken.write_bytes(broken.read_bytes()[:-1])

    cache = disk_cache(tmp_path)
    assert compute_prompt(cache, 1, PROMPT) == Admission(4, 4)  # page 0 only
    assert rows_of(cache, 1, 14) == [float(t) for t in PROMPT] * 2
    cache.close()
    assert cache.disk is not None and cache.disk.stats().read_failures == 1
    assert read_page(
        broken, cache.disk.identity, digests[1], tensor_bytes(torch.empty(2, 2, PS, 1, 2))
    )


def test_a_prompt_that_cannot_fit_now_reads_nothing_yet(tmp_path: Path) -> None:
    writer = disk_cache(tmp_path)
    compute_prompt(writer, 1, PROMPT)
    writer.close()
    cache = disk_cache(tmp_path, num_pages=5)
    assert cache.admit(1, list(range(16))) is not None  # 4 of its 5 pages held
    assert cache.admit(2, PROMPT) is None
    assert cache.stats().disk_hit_tokens == 0 and cache.stats().pages_free == 1
    cache.close()


def write_pages_from_a_process(folder: Path, values: list[float]) -> None:
    """Another worker on the same host: its own tier on the shared folder."""
    disk = tier(folder)
    for value in values:
        disk.write(bytes([int(value)]) * 16, partial(payload, value))
    disk.close()


def test_workers_sharing_a_folder_write_the_same_pages_and_each_reads_them_whole(
    tmp_path: Path,
) -> None:
    """Two processes write the same 200 pages at once (renames over each other's files):
    every page is one whole file that either reads back."""
    values = [float(v) for v in range(1, 201)]
    context = multiprocessing.get_context("spawn")
    writers = [
        context.Process(target=write_pages_from_a_process, args=(tmp_path, order))
        for order in (values, values[::-1])
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    disk = tier(tmp_path)
    assert len(names(disk)) == 200 and not list(disk.dir.glob("*.tmp"))
    into = torch.empty(8)
    for value in values:
        assert disk.read(bytes([int(value)]) * 16, tensor_bytes(into))
        assert torch.equal(into, payload(value))
    disk.close()


def test_pages_written_and_evicted_are_published_as_disk_events(tmp_path: Path) -> None:
    """With KV events on, each page file written is a BlockStored of medium DISK, chained as
    its memory page is published, and each evicted one a BlockRemoved (the engine thread
    takes them with the memory tier's events)."""
    cache = disk_cache(tmp_path)
    recorder = KvEventRecorder(PS, "CPU")
    assert cache.disk is not None
    cache.pool.recorder, recorder.disk_events = recorder, cache.disk.take_events
    compute_prompt(cache, 1, PROMPT)
    cache.disk.flush()
    hashes = prompt_block_hashes(PROMPT, PS)
    on_disk = [e for e in recorder.take() if getattr(e, "medium", None) == DISK]
    expected = [
        BlockStored((h,), parent, tuple(PROMPT[i * PS : (i + 1) * PS]), PS, None, DISK)
        for i, (h, parent) in enumerate(zip(hashes, [None, *hashes[:2]], strict=False))
    ]
    assert on_disk == expected
    cache.disk.budget_bytes = 0  # every file goes at the next eviction
    cache.disk._evict()
    assert recorder.take() == [BlockRemoved((h,), DISK) for h in hashes]
    cache.close()
