"""The models `astrai serve` can run: from repeated `--model`, `--models-dir` or a
`--models` TOML file, each with its own engine options, workers, idle TTL, pin and preload."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.cli_options import flags_of
from common.model_control import CatalogModel
from common.model_names import model_names
from worker.engine.options import EngineOptions
from worker.model.default_model import default_model_path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

# A worker's memory beyond its weights and KV cache (Python, torch, the tokenizer, buffers):
# what a model's load is budgeted at before one of its workers was measured.
WORKER_BASE_MB = 400
WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".bin")
# The later parts of a split GGUF (model-00002-of-00003.gguf) are read with the first one.
LATER_SPLIT = re.compile(r"-(\d{5})-of-\d{5}\.gguf$")
# The name that means the embedded default model, in `--model` and a models file's `path`.
DEFAULT_MODEL = "default"
# Keys of a model's table that are not engine options.
MODEL_KEYS = ("path", "name", "aliases", "workers", "ttl", "pinned", "preload")
# Engine options a model may not set itself: `astrai serve` shares the cores out.
SERVE_DECIDES = frozenset({"num_threads", "served_model_name"})


@dataclass(frozen=True)
class ModelSpec:
    """One model: where it is (None: the embedded default), how its workers run it."""

    path: str | None
    engine: EngineOptions
    workers: int = 1
    ttl_s: float | None = None
    pinned: bool = False
    preload: bool | None = None  # None: not said (the first model preloads)

    def __post_init__(self) -> None:
        if self.path is not None and not Path(self.path).exists():
            raise ValueError(f"model {self.path}: no such file or folder")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers} ({self.label})")
        if self.ttl_s is not None and self.ttl_s <= 0:
            raise ValueError(f"ttl must be > 0 seconds, got {self.ttl_s} ({self.label})")

    @property
    def label(self) -> str:
        return self.path or "the default model"

    @property
    def names(self) -> tuple[str, tuple[str, ...]]:
        """(its name in answers, its aliases and patterns): the names its workers register."""
        return model_names(self.path, self.engine.served_model_name)

    def estimate_mb(self) -> int:
        """Its workers' memory before one was measured: weights, KV cache and the base."""
        weights = weight_bytes(Path(self.path) if self.path else default_model_path())
        return self.workers * (weights // 2**20 + self.engine.kv_cache_mb + WORKER_BASE_MB)

    def catalog_entry(self) -> CatalogModel:
        name, aliases = self.names
        estimate = self.estimate_mb()
        return CatalogModel(name, aliases, self.ttl_s, self.pinned, bool(self.preload), estimate)


def weight_bytes(path: Path) -> int:
    """The bytes of a GGUF file, or of the weight files in a folder (0 if none is there)."""
    if path.is_file():
        return path.stat().st_size
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    return 0


def models_in_dir(folder: Path) -> list[str]:
    """Each model in `folder`: every GGUF (a split one by its first part; not a vision
    projector) and every subfolder with a config.json, sorted by name."""
    if not folder.is_dir():
        raise ValueError(f"--models-dir {folder} is not a folder")
    found = []
    for entry in sorted(folder.iterdir()):
        split = LATER_SPLIT.search(entry.name)
        if entry.suffix == ".gguf" and not entry.name.startswith("mmproj"):
            if split is None or split.group(1) == "00001":
                found.append(str(entry))
        elif entry.is_dir() and (entry / "config.json").is_file():
            found.append(str(entry))
    if not found:
        raise ValueError(f"--models-dir {folder} holds no .gguf file and no model folder")
    return found


def _engine_option_types() -> dict[str, tuple[str, type]]:
    return {f.name: (f.kind, f.value_type) for f in flags_of(EngineOptions, SERVE_DECIDES)}


def _checked(key: str, value: Any, kind: str, value_type: type, where: str) -> Any:
    """A TOML value of an engine option, as its field takes it (ValueError naming the key)."""
    if kind == "switch" and isinstance(value, bool):
        return value
    if kind == "repeat" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    number = value_type is float and isinstance(value, int)
    if (
        kind == "value"
        and not isinstance(value, bool)
        and (isinstance(value, value_type) or number)
    ):
        return value_type(value)
    wanted = {"switch": "true or false", "repeat": "a list of strings"}.get(
        kind, value_type.__name__
    )
    raise ValueError(f"{where}: {key} must be {wanted}, got {value!r}")


def spec_from_table(
    table: Mapping[str, Any],
    engine: EngineOptions,
    defaults: ModelSpec,
    where: str,
    base: Path,
) -> ModelSpec:
    """One `[[model]]` table (or `[defaults]`) over the command line's options."""
    types = _engine_option_types()
    overrides: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        if key in types:
            overrides[key] = _checked(raw_key, value, *types[key], where)
        elif key in MODEL_KEYS:
            fields[key] = value
        else:
            known = ", ".join(sorted((*MODEL_KEYS, *types)))
            raise ValueError(f"{where}: unknown key {raw_key!r}; a model takes: {known}")
    for key, wanted in (("workers", int), ("ttl", float), ("pinned", bool), ("preload", bool)):
        if key in fields:
            fields[key] = _checked(
                key, fields[key], "value" if wanted is not bool else "switch", wanted, where
            )
    names = [fields["name"]] if "name" in fields else []
    aliases = fields.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ValueError(f"{where}: aliases must be a list of strings, got {aliases!r}")
    if names and not isinstance(names[0], str):
        raise ValueError(f"{where}: name must be a string, got {names[0]!r}")
    path = fields.get("path", defaults.path)
    if path is not None:
        if not isinstance(path, str):
            raise ValueError(f"{where}: path must be a string, got {path!r}")
        path = path if path == DEFAULT_MODEL else str(base / Path(path).expanduser())
    served = (*names, *aliases) or engine.served_model_name
    try:
        options = dataclasses.replace(defaults.engine, **overrides, served_model_name=tuple(served))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return ModelSpec(
        path=None if path == DEFAULT_MODEL else path,
        engine=options,
        workers=fields.get("workers", defaults.workers),
        ttl_s=fields.get("ttl", defaults.ttl_s),
        pinned=fields.get("pinned", defaults.pinned),
        preload=fields.get("preload", defaults.preload),
    )


def read_models_file(path: Path, defaults: ModelSpec) -> list[ModelSpec]:
    """`[defaults]` then each `[[model]]` of a TOML file; relative paths from its folder."""
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"--models {path}: {exc}") from None
    unknown = set(document) - {"defaults", "model"}
    if unknown:
        raise ValueError(
            f"--models {path}: unknown table(s) {sorted(unknown)}; use [defaults] and [[model]]"
        )
    base = path.parent
    if "defaults" in document:
        if "path" in document["defaults"] or "name" in document["defaults"]:
            raise ValueError(f"--models {path}: [defaults] cannot set path or name")
        defaults = spec_from_table(
            document["defaults"], defaults.engine, defaults, f"{path} [defaults]", base
        )
    tables = document.get("model", [])
    if not isinstance(tables, list) or not tables:
        raise ValueError(f"--models {path}: no [[model]] table")
    specs = []
    for i, table in enumerate(tables, start=1):
        if "path" not in table:
            raise ValueError(f'{path} model {i}: path is required ("default": the embedded one)')
        specs.append(spec_from_table(table, defaults.engine, defaults, f"{path} model {i}", base))
    return specs


def build_catalog(
    models: Sequence[str],
    models_dir: str | None,
    models_file: str | None,
    defaults: ModelSpec,
) -> tuple[ModelSpec, ...]:
    """Every model to serve, in order; the first preloads unless a model's table says which.

    `defaults` carries the command line's engine options, workers and TTL; with no model
    named anywhere, the embedded default model alone (today's one-model serve)."""
    paths = [None if model == DEFAULT_MODEL else model for model in models]
    specs = [dataclasses.replace(defaults, path=path) for path in paths]
    if models_dir is not None:
        specs += [dataclasses.replace(defaults, path=p) for p in models_in_dir(Path(models_dir))]
    several = len(specs) > 1 or models_file is not None
    if several and defaults.engine.served_model_name:
        raise ValueError(
            "--served-model-name names one model; with several, give each its name and "
            "aliases in a --models file"
        )
    if models_file is not None:
        specs += read_models_file(Path(models_file).expanduser(), defaults)
    if not specs:
        specs = [defaults]
    if all(spec.preload is None for spec in specs):
        specs[0] = dataclasses.replace(specs[0], preload=True)
    names: dict[str, str] = {}
    for spec in specs:
        name, aliases = spec.names
        for served in (name, *aliases):
            if served in names:
                raise ValueError(
                    f"the name {served!r} is given to two models: {names[served]} and {spec.label}"
                )
            names[served] = spec.label
    return tuple(specs)
