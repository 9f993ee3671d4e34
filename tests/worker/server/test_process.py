"""The worker process's start: what loading made is frozen out of the collector's reach."""

from __future__ import annotations

import gc

from worker.server.process import freeze_loaded_heap


def test_freezing_moves_the_live_objects_to_the_permanent_generation():
    survivors = [object() for _ in range(10)]
    assert any(o is survivors for o in gc.get_objects())
    try:
        freeze_loaded_heap()
        # Frozen: no generation holds it any more, so no collection walks it.
        assert not any(o is survivors for o in gc.get_objects())
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
