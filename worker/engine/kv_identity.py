"""A model's KV pages' name on disk: its files' contents and the settings that shape the rows."""

from __future__ import annotations

import fcntl
import hashlib
import json
from pathlib import Path

import torch

from worker.machine.paths import cache_root
from worker.model.model_dir import model_files

# Bumped whenever the code computes a model's k/v rows differently (a kernel's arithmetic,
# the attention's positions): pages written before are then never read.
KV_ROWS_VERSION = 1
CHUNK_BYTES = 8 << 20
MAX_REMEMBERED = 256


def files_digest(files: list[Path]) -> str:
    """SHA-256 over the files' names and contents; cached by path, size and change time, so
    a model is read whole once, not at every start."""
    keys = [f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files]
    key = "|".join(keys)
    index = cache_root() / "kv-model-digests.json"
    known = _read_index(index)
    if key in known:
        return known[key]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as file:
            while chunk := file.read(CHUNK_BYTES):
                digest.update(chunk)
    value = digest.hexdigest()
    _remember(index, key, value)
    return value


def kv_identity(model_dir: Path, setup: str) -> str:
    """The identity of the rows a model computes under `setup` (the dtype, KV dtype, kernel
    choices, page size, context and RoPE scaling the worker runs)."""
    digest = files_digest(model_files(model_dir))
    return f"kv-rows {KV_ROWS_VERSION}|torch {torch.__version__}|model {digest}|{setup}"


def _read_index(path: Path) -> dict[str, str]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _remember(path: Path, key: str, value: str) -> None:
    """Add one digest to the index; several workers may start at once, so under a lock.
    A cache only: failing to write it costs the next start one more read of the files."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.with_suffix(".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            known = _read_index(path)
            known[key] = value
            for stale in list(known)[:-MAX_REMEMBERED]:  # oldest first
                del known[stale]
            temp = path.with_suffix(".tmp")
            temp.write_text(json.dumps(known))
            temp.replace(path)
    except OSError:
        pass
