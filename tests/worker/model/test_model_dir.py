"""Finding a model: a GGUF's config and tokenizer are read once, and that is logged."""

from __future__ import annotations

import logging
import re

from tests.worker.model_factory import hf_model, write_gguf
from worker.model.model_dir import resolve_model_dir


def test_the_first_read_of_a_gguf_logs_its_seconds_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ASTRAI_CACHE_DIR", str(tmp_path / "cache"))
    gguf = write_gguf(hf_model("smollm"), tmp_path / "tiny.gguf")
    with caplog.at_level(logging.INFO, logger="worker.model.model_dir"):
        target = resolve_model_dir(gguf)
    lines = [r.getMessage() for r in caplog.records if r.name == "worker.model.model_dir"]
    assert len(lines) == 1
    assert re.fullmatch(r"read tiny\.gguf's config and tokenizer in \d+\.\d s", lines[0])

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="worker.model.model_dir"):
        assert resolve_model_dir(gguf) == target
    assert [r for r in caplog.records if r.name == "worker.model.model_dir"] == []
