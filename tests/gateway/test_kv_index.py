"""KvIndex: batches in sequence order, replays and gaps told apart, contradictions caught."""

from common.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEventBatch,
    prompt_block_hashes,
)
from gateway.kv_index import Applied, KvIndex

TOKENS = list(range(10))
H = prompt_block_hashes(TOKENS, 4)  # two full pages: H[0], then H[1] after it


def batch(*events):
    return KvEventBatch(0.0, events)


def stored(hashes, parent=None, size=4):
    return BlockStored(tuple(hashes), parent, tuple(range(len(hashes) * size)), size)


def following(*worker_ids):
    index = KvIndex(expect_s=10.0)
    for worker_id in worker_ids:
        index.track(worker_id, 4)
    return index


def test_batches_apply_in_order_from_a_clean_start():
    index = following("w0")
    assert index.apply("w0", 0, batch(AllBlocksCleared())) is Applied.APPLIED
    assert index.get("w0").in_step
    assert index.apply("w0", 1, batch(stored([H[0]]))) is Applied.APPLIED
    assert index.apply("w0", 2, batch(stored([H[1]], parent=H[0]))) is Applied.APPLIED
    assert index.match("w0", H, now=0.0) == 2
    assert index.apply("w0", 3, batch(BlockRemoved((H[1],)))) is Applied.APPLIED
    assert index.match("w0", H, now=0.0) == 1
    assert index.get("w0").last_seq == 3


def test_a_replayed_batch_changes_nothing():
    index = following("w0")
    index.apply("w0", 0, batch(AllBlocksCleared(), stored([H[0]])))
    index.apply("w0", 1, batch(BlockRemoved((H[0],))))
    assert index.apply("w0", 0, batch(AllBlocksCleared(), stored([H[0]]))) is Applied.REPLAYED
    assert index.apply("w0", 1, batch(BlockRemoved((H[0],)))) is Applied.REPLAYED
    assert index.match("w0", H, now=0.0) == 0
    assert index.get("w0").in_step


def test_a_gap_puts_the_worker_out_of_step_until_a_clean_batch():
    index = following("w0")
    index.apply("w0", 0, batch(AllBlocksCleared(), stored([H[0]])))
    assert index.apply("w0", 2, batch(stored([H[1]], parent=H[0]))) is Applied.GAP
    pages = index.get("w0")
    assert not pages.in_step and pages.last_seq == 0  # a replay resumes from batch 1
    assert index.match("w0", H, now=0.0) == 1  # what it had still routes
    # A snapshot: numbered with the publisher's last batch, it starts from nothing.
    snapshot = batch(AllBlocksCleared(), stored(H))
    assert index.apply("w0", 7, snapshot) is Applied.APPLIED
    assert pages.in_step and pages.last_seq == 7
    assert index.match("w0", H, now=0.0) == 2


def test_before_any_clean_batch_everything_is_a_gap():
    index = following("w0")
    assert index.apply("w0", 5, batch(stored([H[0]]))) is Applied.GAP
    assert index.get("w0").last_seq is None


def test_a_replay_that_fills_the_gap_brings_it_back_in_step():
    index = following("w0")
    index.apply("w0", 0, batch(AllBlocksCleared()))
    index.apply("w0", 2, batch(stored([H[0]])))  # gap: batch 1 missed
    assert index.apply("w0", 1, batch(stored([H[0]]))) is Applied.APPLIED
    index.mark_in_step("w0")
    assert index.get("w0").in_step and index.get("w0").last_seq == 1


def test_contradicting_events_reset_the_sequence():
    index = following("w0")
    index.apply("w0", 0, batch(AllBlocksCleared()))
    unknown_parent = batch(stored([H[1]], parent=H[0]))
    assert index.apply("w0", 1, unknown_parent) is Applied.INCONSISTENT
    assert index.get("w0").last_seq is None and not index.get("w0").in_step
    index.apply("w0", 2, batch(AllBlocksCleared()))
    assert index.apply("w0", 3, batch(BlockRemoved((H[0],)))) is Applied.INCONSISTENT
    index.apply("w0", 4, batch(AllBlocksCleared()))
    assert index.apply("w0", 5, batch(stored([H[0]], size=8))) is Applied.INCONSISTENT


def test_events_of_a_worker_nobody_follows_are_refused():
    index = following("w0")
    assert index.apply("w9", 0, batch(AllBlocksCleared())) is Applied.UNKNOWN_WORKER
    index.forget("w0")
    assert index.apply("w0", 0, batch(AllBlocksCleared())) is Applied.UNKNOWN_WORKER
    assert index.match("w0", H, now=0.0) == 0


def test_match_counts_leading_pages_only():
    index = following("w0")
    index.apply("w0", 0, batch(AllBlocksCleared(), stored([H[0]])))
    other = prompt_block_hashes([9, 9, 9, 9, *TOKENS[4:]], 4)
    assert index.match("w0", other, now=0.0) == 0
    assert index.match("w0", [H[0], other[1]], now=0.0) == 1


def test_expected_pages_count_until_they_expire_or_are_removed():
    index = following("w0", "w1")
    index.apply("w0", 0, batch(AllBlocksCleared()))
    index.expect("w0", H, now=100.0)
    assert index.match("w0", H, now=105.0) == 2
    assert index.match("w1", H, now=105.0) == 0
    assert index.match("w0", H, now=110.0) == 0  # expired: the worker never said it held them
    index.expect("w0", H, now=200.0)
    index.apply("w0", 1, batch(stored([H[0]])))
    index.apply("w0", 2, batch(BlockRemoved((H[0],))))
    assert index.match("w0", H, now=201.0) == 0  # removed by the worker: no longer expected
    assert index.holds_any(["w0"]) and not index.holds_any(["w1"])


def test_pages_on_disk_are_kept_apart_and_match_only_when_asked():
    index = following("w0")
    on_disk = BlockStored((H[0], H[1]), None, tuple(range(8)), 4, None, "DISK")
    index.apply("w0", 0, batch(AllBlocksCleared(), stored(H[:1]), on_disk))
    index.apply("w0", 1, batch(BlockRemoved((H[0],))))  # out of memory, still on disk
    assert index.match("w0", H, now=0.0) == 0
    assert index.match("w0", H, now=0.0, disk=True) == 2
    # Disk events are loose: a page removed twice, or stored without its parent, is no fault.
    assert index.apply("w0", 2, batch(BlockRemoved((H[1],), "DISK"))) is Applied.APPLIED
    assert index.apply("w0", 3, batch(BlockRemoved((H[1],), "DISK"))) is Applied.APPLIED
    assert index.match("w0", H, now=0.0, disk=True) == 1
    assert index.apply("w0", 4, batch(AllBlocksCleared())) is Applied.APPLIED
    assert index.match("w0", H, now=0.0, disk=True) == 0
