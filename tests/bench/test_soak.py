"""The soak finds its workers by their command line, however the supervisor writes the flag."""

from bench.soak import worker_id_of


def test_the_worker_id_is_read_from_either_spelling_of_the_flag():
    python = [b"python", b"-m", b"worker", b"--log-level", b"info"]
    assert worker_id_of([*python, b"--worker-id=worker-1", b"--device=cpu"]) == "worker-1"
    assert worker_id_of([*python, b"--worker-id", b"worker-0"]) == "worker-0"
    assert worker_id_of([*python, b"--worker-id"]) is None  # cut short: no value
    assert worker_id_of([b"python", b"-m", b"gateway"]) is None
