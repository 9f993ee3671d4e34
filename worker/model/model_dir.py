"""Find a model: a Hugging Face folder, or a GGUF file read in place; never from a hub."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

from worker.machine.cache_folder import made_once
from worker.machine.paths import cache_root
from worker.model.default_model import default_model_path
from worker.model.gguf_tensors import read_gguf_config
from worker.model.tokenizer_store import copy_gguf_tokenizer

MODEL_FILE_SUFFIXES = (".json", ".safetensors", ".gguf")

log = logging.getLogger(__name__)
# In a GGUF's model folder: the file its weights are read from, each time.
GGUF_SOURCE = "gguf_source.json"


def resolve_model_dir(model: str | os.PathLike[str] | None) -> Path:
    """A model folder for `model`: itself, or, for a GGUF file, a cached folder holding its
    config and tokenizer (no weights: those are read from the file at every load)."""
    path = Path(model) if model is not None else default_model_path()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model folder {path} has no config.json")
        return path
    if path.suffix == ".gguf" and path.is_file():
        return _gguf_folder(path)
    raise FileNotFoundError(
        f"model must be a Hugging Face folder or a .gguf file, got {str(path)!r}"
    )


def gguf_source(model_dir: Path) -> Path | None:
    """The GGUF file a model folder's weights live in, or None for a folder of safetensors."""
    marker = model_dir / GGUF_SOURCE
    if not marker.is_file():
        return None
    source = Path(json.loads(marker.read_text())["file"])
    if not source.is_file():
        raise FileNotFoundError(f"{model_dir} reads its weights from {source}, which is gone")
    return source


def model_files(model_dir: Path) -> list[Path]:
    """The files whose contents are the model: the folder's config and weights, and the GGUF
    it was made from."""
    files = sorted(p for p in model_dir.iterdir() if p.suffix in MODEL_FILE_SUFFIXES)
    if (source := gguf_source(model_dir)) is not None:
        files.append(source)
    return files


def _gguf_folder(gguf_path: Path) -> Path:
    """`<cache>/models/<name>-<key>/`: config.json, the tokenizer and GGUF_SOURCE, made once."""
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    target = cache_root() / "models" / f"{gguf_path.stem}-{key.hexdigest()[:16]}-codes"
    if (target / GGUF_SOURCE).is_file():
        return target
    started = time.monotonic()

    def make(folder: Path) -> None:
        config = read_gguf_config(gguf_path)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        copy_gguf_tokenizer(gguf_path, folder)
        (folder / GGUF_SOURCE).write_text(json.dumps({"file": str(gguf_path.resolve())}))

    made_once(target, GGUF_SOURCE, make)
    log.info("read %s's config and tokenizer in %.1f s", gguf_path.name, time.monotonic() - started)
    return target
