"""Finding model weights: the first GGUF conversion logs its size and its seconds, once."""

from __future__ import annotations

import logging
import re

from tests.worker.model_factory import hf_model, write_gguf
from worker.model.model_dir import resolve_model_dir


def test_the_first_conversion_logs_its_size_and_its_seconds(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ASTRAI_CACHE_DIR", str(tmp_path / "cache"))
    gguf = write_gguf(hf_model("smollm"), tmp_path / "tiny.gguf")
    with caplog.at_level(logging.INFO, logger="worker.model.model_dir"):
        target = resolve_model_dir(gguf)
    lines = [r.getMessage() for r in caplog.records if r.name == "worker.model.model_dir"]
    assert len(lines) == 2
    assert re.fullmatch(
        rf"converting tiny\.gguf \(\d+ MiB\) into {re.escape(str(target))}, once; "
        r"later starts load that folder",
        lines[0],
    )
    assert re.fullmatch(r"converted tiny\.gguf in \d+\.\d s", lines[1])

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="worker.model.model_dir"):
        assert resolve_model_dir(gguf) == target
    assert [r for r in caplog.records if r.name == "worker.model.model_dir"] == []
