"""bench.profile_decode refuses a batch it cannot form instead of waiting out its timeouts."""

import pytest

from bench.profile_decode import check_batch


def test_a_batch_beyond_the_workload_or_the_engine_is_refused_with_the_reason():
    check_batch(32, conversations=64, max_seqs=64)
    with pytest.raises(SystemExit, match="W1 has 64 conversations"):
        check_batch(256, conversations=64, max_seqs=64)
    with pytest.raises(SystemExit, match="W1 has 64 conversations"):
        check_batch(0, conversations=64, max_seqs=64)
    with pytest.raises(SystemExit, match="at most 16 sequences a step"):
        check_batch(32, conversations=64, max_seqs=16)
