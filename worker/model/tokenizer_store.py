"""Converted GGUF tokenizers kept by what they were converted from: a model's several
quantizations (or a file moved or downloaded again) convert their tokenizer once."""

from __future__ import annotations

import hashlib
import shutil
from importlib.metadata import version
from pathlib import Path

from worker.machine.cache_folder import made_once
from worker.machine.paths import cache_root
from worker.model.gguf_tensors import read_gguf_header
from worker.model.gguf_tokenizer import save_gguf_tokenizer

# In a stored tokenizer's folder, written last: a folder without it is not finished.
COMPLETE = ".complete"


def copy_gguf_tokenizer(gguf_path: Path, folder: Path) -> None:
    """Write `gguf_path`'s tokenizer files into `folder`: converted from the file the first
    time this version of transformers sees its tokenizer (the bytes of its `tokenizer.*` keys
    and architecture), copied from `<cache>/tokenizers/<key>/` every other time. Raises
    GgufFileError as the conversion does."""
    stored = _stored(gguf_path)
    for item in stored.iterdir():
        if item.name != COMPLETE:
            shutil.copy2(item, folder / item.name)


def _stored(gguf_path: Path) -> Path:
    # The converter's version too: a newer transformers may convert the same bytes otherwise.
    tokenizer = read_gguf_header(gguf_path).tokenizer_digest
    key = hashlib.sha256(f"{tokenizer}|transformers {version('transformers')}".encode())
    target = cache_root() / "tokenizers" / key.hexdigest()[:32]

    def make(folder: Path) -> None:
        save_gguf_tokenizer(gguf_path, folder)
        (folder / COMPLETE).touch()

    return made_once(target, COMPLETE, make)
