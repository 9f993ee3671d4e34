"""A model's pooling (or that it reranks) as its files state it; `--pooling` overrides them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worker.model.gguf_tensors import read_gguf_header
from worker.model.model_dir import gguf_source
from worker.model.pooling import ModelPooling, Pooling

_ST = "sentence_transformers.models."
_TRANSFORMER, _POOLING, _NORMALIZE = f"{_ST}Transformer", f"{_ST}Pooling", f"{_ST}Normalize"
# 1_Pooling/config.json's modes this engine computes; any other mode set is refused by name.
_MODES = {
    "pooling_mode_lasttoken": Pooling.LAST,
    "pooling_mode_mean_tokens": Pooling.MEAN,
    "pooling_mode_cls_token": Pooling.CLS,
}
# ggml's enum llama_pooling_type (gguf.PoolingType): 0 none, 1 mean, 2 cls, 3 last, 4 rank.
_GGUF_POOLING = {1: Pooling.MEAN, 2: Pooling.CLS, 3: Pooling.LAST, 4: Pooling.RANK}
# sentence-transformers' module that scores a causal LM's yes/no logits (v5.4 on).
_LOGIT_SCORE = "LogitScore"
# What llama.cpp's converter looks for in a README to know a Qwen3-Reranker (its
# config.json says only Qwen3ForCausalLM).
_QWEN3_RERANKER_README = "# Qwen3-Reranker"


def model_pooling(model_dir: Path, override: str | None = None) -> ModelPooling:
    """How the model in `model_dir` embeds. `override` (`--pooling`) wins, normalized as
    OpenAI's vectors are unless the folder's modules.json leaves Normalize out."""
    stated = _stated_pooling(model_dir)
    if override is None:
        return stated
    if override == Pooling.RANK:  # a score is never scaled
        return ModelPooling(Pooling.RANK, False, "--pooling")
    normalize = stated.normalize if stated.pooling not in (None, Pooling.RANK) else True
    return ModelPooling(Pooling(override), normalize, "--pooling")


def _stated_pooling(model_dir: Path) -> ModelPooling:
    source = gguf_source(model_dir)
    if source is not None:
        return _gguf_pooling(source)
    ranking = _stated_ranking(model_dir)
    if ranking is not None:
        return ModelPooling(Pooling.RANK, False, ranking)
    modules = model_dir / "modules.json"
    if modules.is_file():
        return _sentence_transformers_pooling(model_dir, json.loads(modules.read_text()))
    return ModelPooling(None, reason="its folder has no sentence-transformers modules.json")


def _stated_ranking(model_dir: Path) -> str | None:
    """Where a folder says its model is a reranker, or None: config.json's architectures
    (a ...ForSequenceClassification head), a sentence-transformers LogitScore module, or a
    README headed as Qwen3-Reranker's is."""
    config_file = model_dir / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    classifiers = [a for a in config.get("architectures") or [] if "ForSequenceClassification" in a]
    if classifiers:
        return f"config.json architectures: {classifiers[0]}"
    modules = model_dir / "modules.json"
    if modules.is_file() and _LOGIT_SCORE in modules.read_text():
        return f"sentence-transformers modules.json: {_LOGIT_SCORE}"
    readme = model_dir / "README.md"
    if readme.is_file() and _QWEN3_RERANKER_README in readme.read_text(errors="replace"):
        return f"README.md reads {_QWEN3_RERANKER_README!r}"
    return None


def _sentence_transformers_pooling(model_dir: Path, modules: Any) -> ModelPooling:
    """The Pooling module's mode and whether Normalize follows it. A module this engine does
    not compute (Dense, LayerNorm, …) would change the vector: such a model has no pooling."""
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        return ModelPooling(None, reason="its modules.json is not a list of modules")
    types = [str(m.get("type", "")) for m in modules]
    others = [t for t in types if t not in (_TRANSFORMER, _POOLING, _NORMALIZE)]
    if others:
        return ModelPooling(None, reason=f"its modules.json lists {others[0]}, not served here")
    pooling_modules = [m for m in modules if m.get("type") == _POOLING]
    if not pooling_modules:
        return ModelPooling(None, reason="its modules.json lists no Pooling module")
    config_file = model_dir / str(pooling_modules[0].get("path", "")) / "config.json"
    if not config_file.is_file():
        return ModelPooling(None, reason=f"{config_file.relative_to(model_dir)} is missing")
    config = json.loads(config_file.read_text())
    modes = sorted(key for key, on in config.items() if key.startswith("pooling_mode_") and on)
    if len(modes) != 1 or modes[0] not in _MODES:
        named = ", ".join(modes) or "no mode"
        return ModelPooling(None, reason=f"its Pooling config sets {named}, not served here")
    normalize = _NORMALIZE in types
    return ModelPooling(_MODES[modes[0]], normalize, "sentence-transformers modules.json")


def _gguf_pooling(source: Path) -> ModelPooling:
    metadata = read_gguf_header(source).metadata
    key = f"{metadata.get('general.architecture')}.pooling_type"
    kind = metadata.get(key)
    if kind in _GGUF_POOLING:
        return ModelPooling(_GGUF_POOLING[kind], _GGUF_POOLING[kind] != Pooling.RANK, key)
    if kind is None:
        return ModelPooling(None, reason=f"its GGUF metadata has no {key}")
    return ModelPooling(None, reason=f"its GGUF {key} is {kind}, not an embedding's")
