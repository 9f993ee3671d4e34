"""KvEventRecorder on a real PageCache: the exact events of storing, sharing and evicting pages."""

from __future__ import annotations

import torch

from common.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, prompt_block_hashes
from worker.kv.base import KVStorage
from worker.kv.kv_events import KvEventRecorder
from worker.kv.paged import PageCache

PS = 4


def recorded_cache(num_pages: int = 8) -> tuple[PageCache, KvEventRecorder]:
    storage = KVStorage(1, num_pages, PS, 1, 2, torch.float32, torch.device("cpu"))
    cache = PageCache(storage, PS, 64, True, 0.0)
    recorder = KvEventRecorder(PS, "CPU")
    cache.pool.recorder = recorder
    return cache, recorder


def test_admitting_a_prompt_stores_its_full_pages_as_one_chain():
    cache, recorder = recorded_cache()
    tokens = list(range(10))  # two full pages and two tokens
    cache.admit(1, tokens)
    hashes = tuple(prompt_block_hashes(tokens, PS))
    assert recorder.take() == [BlockStored(hashes, None, tuple(tokens[:8]), PS, None, "CPU")]
    assert recorder.take() == []
    assert len(recorder) == 2


def test_a_shared_prefix_is_stored_once_and_a_branch_names_its_parent():
    cache, recorder = recorded_cache()
    first = list(range(9))
    cache.admit(1, first)
    cache.commit(1, first, 9)
    recorder.take()
    branch = [*first[:4], 40, 41, 42, 43, 44]
    cache.admit(2, branch)  # its first page is a hit; its second is new
    h1, h2 = prompt_block_hashes(branch, PS)
    assert h1 == prompt_block_hashes(first, PS)[0]
    assert recorder.take() == [BlockStored((h2,), h1, (40, 41, 42, 43), PS, None, "CPU")]
    # Decoding fills the next page: it joins the index computed, chained after the last.
    grown = [*branch, 45, 46, 47]
    assert cache.grow(2, len(grown))
    cache.commit(2, grown, len(grown))
    h3 = prompt_block_hashes(grown, PS)[2]
    assert recorder.take() == [BlockStored((h3,), h2, (44, 45, 46, 47), PS, None, "CPU")]


def test_evicting_cached_pages_removes_them_deepest_first():
    cache, recorder = recorded_cache(num_pages=4)
    first = list(range(8))
    cache.admit(1, first)
    cache.commit(1, first, 8)
    cache.release(1)  # both pages stay cached, evictable
    h1, h2 = prompt_block_hashes(first, PS)
    recorder.take()
    other = list(range(100, 116))
    cache.admit(2, other)  # needs all four pages: the two cached ones are evicted
    stored = tuple(prompt_block_hashes(other, PS))
    assert recorder.take() == [
        BlockRemoved((h2, h1), "CPU"),
        BlockStored(stored, None, tuple(other), PS, None, "CPU"),
    ]
    assert len(recorder) == 4


def test_an_owner_leaving_before_computing_removes_its_pending_pages():
    cache, recorder = recorded_cache()
    tokens = list(range(8))
    cache.admit(1, tokens)
    recorder.take()
    cache.release(1)  # never computed: its pages leave the index
    h1, h2 = prompt_block_hashes(tokens, PS)
    assert recorder.take() == [BlockRemoved((h2, h1), "CPU")]
    assert len(recorder) == 0


def test_cleared_forgets_every_page():
    cache, recorder = recorded_cache()
    cache.admit(1, list(range(8)))
    recorder.cleared()
    assert recorder.take()[-1] == AllBlocksCleared()
    assert len(recorder) == 0


def test_pages_indexed_before_the_recorder_are_never_named():
    cache, recorder = recorded_cache()
    cache.pool.recorder = None
    tokens = list(range(8))
    cache.admit(1, tokens)
    cache.pool.recorder = recorder
    assert cache.grow(1, 12)
    cache.commit(1, [*tokens, 8, 9, 10, 11], 12)  # a third page after an unnamed parent
    cache.release(1)  # no event for pages it never announced
    assert recorder.take() == [] and len(recorder) == 0
