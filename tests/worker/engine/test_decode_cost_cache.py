"""The decode-cost table: measured at a first start on a quiet CPU, read from the cache after."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.engine import decode_cost_cache, inference_engine
from worker.engine.decode_cost_cache import cached_decode_cost, model_identity
from worker.engine.inference_engine import InferenceEngine
from worker.engine.speculation import PROBE_SLOTS, DecodeCost

TABLE = DecodeCost((1, 2, 4), (0.010, 0.012, 0.015))


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A private cache folder (the kernels' builds stay where they are), a quiet CPU."""
    monkeypatch.setattr(decode_cost_cache, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(decode_cost_cache, "cpu_busy", lambda: False)
    return tmp_path


def counting(calls: list[int]) -> DecodeCost:
    calls.append(1)
    return TABLE


def test_a_table_is_measured_once_per_setup(cache: Path) -> None:
    calls: list[int] = []
    assert cached_decode_cost("model A|bf16", lambda: counting(calls)) == (TABLE, True)
    assert cached_decode_cost("model A|bf16", lambda: counting(calls)) == (TABLE, False)
    assert cached_decode_cost("model A|f32", lambda: counting(calls)) == (TABLE, True)
    assert len(calls) == 2
    assert len(list((cache / "kernels").glob("decode-cost-*.json"))) == 2


def test_a_table_measured_on_a_busy_cpu_is_not_kept(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decode_cost_cache, "cpu_busy", lambda: True)
    calls: list[int] = []
    for _ in range(2):
        assert cached_decode_cost("model A", lambda: counting(calls)) == (TABLE, True)
    assert len(calls) == 2


def test_a_damaged_file_is_measured_again(cache: Path) -> None:
    calls: list[int] = []
    cached_decode_cost("model A", lambda: counting(calls))
    [path] = (cache / "kernels").glob("decode-cost-*.json")
    path.write_text('{"rows": [2, 1], "seconds": [1, 2]}')  # rows must rise
    assert cached_decode_cost("model A", lambda: counting(calls)) == (TABLE, True)
    assert len(calls) == 2


def test_a_changed_model_file_changes_the_identity(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"12")
    before = model_identity(tmp_path)
    weights.write_bytes(b"123")
    assert model_identity(tmp_path) != before
    (tmp_path / "notes.txt").write_text("not the model's")
    assert model_identity(tmp_path) == model_identity(tmp_path)


def test_a_second_engine_on_the_same_model_takes_the_cached_table(
    cache: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[DecodeCost] = []
    probe = inference_engine.measure_decode_cost

    def spy(*args: object, **kwargs: object) -> DecodeCost:
        measured.append(probe(*args, **kwargs))  # type: ignore[arg-type]
        return measured[-1]

    monkeypatch.setattr(inference_engine, "measure_decode_cost", spy)
    options = {"dtype": "float32", "kv_cache_mb": 8, "speculative_tokens": 3}
    with InferenceEngine(tiny_model_dir, **options) as first:
        assert first.scheduler.drafter.cost.probe == measured[0]
    with InferenceEngine(tiny_model_dir, **options) as second:
        assert second.scheduler.drafter.cost.probe == measured[0]
    assert len(measured) == 1


def _resident_mib() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def test_the_probe_leaves_the_cache_it_did_not_write_untouched(
    cache: Path, tiny_model_dir: Path
) -> None:
    """Zeroing the whole cache after the probe made all of it resident: the default 1 GiB at
    the first start of each model."""
    options = {"dtype": "float32", "kv_cache_mb": 512, "speculative_tokens": 3}
    before = _resident_mib()
    with InferenceEngine(tiny_model_dir, **options) as engine:
        grew = _resident_mib() - before
        for k, v in engine.cache.storage.layers:
            assert not k[:PROBE_SLOTS].any() and not v[:PROBE_SLOTS].any()
    assert list((cache / "kernels").glob("decode-cost-*.json")), "the probe did not run"
    assert grew < 256, f"the engine's start made {grew:.0f} MiB resident of a 512 MiB cache"
