"""transformers' own reading of a GGUF file, loaded once per test session for every module that
compares against it (~15-20 s on 2 cores each time otherwise)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch


def transformers_from_gguf(source: Path) -> Any:
    """The file itself, dequantized by transformers' GGUF loader: an independent oracle. Shared:
    callers only read it (state, forward passes, generate)."""
    # One load per file, whichever way a caller names it (the package's path, or the one a
    # cached model folder records, resolved through any link).
    return _loaded(source.resolve())


@functools.cache
def _loaded(source: Path) -> Any:
    from transformers import AutoModelForCausalLM

    with _gguf_built_once():
        return AutoModelForCausalLM.from_pretrained(
            str(source.parent), gguf_file=source.name, dtype=torch.float32
        )


@contextlib.contextmanager
def _gguf_built_once() -> Iterator[None]:
    """gguf's reader and tensor-name map each built once for the load: transformers opens the
    file twice (its config, then its tensors) and builds the name map once per tensor, over
    half of the load's time on 2 cores. The same objects, so the same weights."""
    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[str, Any] = {}

    def reader(path: Any, *args: Any) -> Any:
        key = f"{Path(path).resolve()} {args}"
        if key not in readers:
            readers[key] = reader_class(path, *args)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map
