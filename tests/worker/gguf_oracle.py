"""transformers' own reading of a GGUF file, loaded once per test session for every module that
compares against it (~15-20 s on 2 cores each time otherwise)."""

from __future__ import annotations

import functools
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

    return AutoModelForCausalLM.from_pretrained(
        str(source.parent), gguf_file=source.name, dtype=torch.float32
    )
