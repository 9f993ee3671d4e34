"""The models `astrai serve` runs: repeated --model, --models-dir and a --models TOML file,
each refused value named, and the plan's worker commands per model."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import build_parser, serve_plan
from launcher.model_catalog import WORKER_BASE_MB, ModelSpec, build_catalog
from worker import cli as worker_cli
from worker.engine.options import EngineOptions

DEFAULTS = ModelSpec(None, EngineOptions(kv_cache_mb=64))


def gguf(folder: Path, name: str, size: int = 3 * 2**20) -> str:
    path = folder / name
    path.write_bytes(b"\0" * size)
    return str(path)


def hf_folder(folder: Path, name: str) -> str:
    path = folder / name
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"\0" * 2**20)
    return str(path)


def test_one_model_or_none_is_todays_serve(tmp_path: Path):
    (only,) = build_catalog([], None, None, DEFAULTS)
    assert only.path is None and only.preload and only.names == ("SmolLM2-135M-Instruct", ())
    (named,) = build_catalog([gguf(tmp_path, "x.gguf")], None, None, DEFAULTS)
    assert named.names[0] == "x" and named.preload


def test_repeated_models_take_their_names_from_their_paths_and_the_first_preloads(tmp_path):
    specs = build_catalog(
        ["default", gguf(tmp_path, "small.gguf"), hf_folder(tmp_path, "embed")],
        None,
        None,
        DEFAULTS,
    )
    assert [s.names[0] for s in specs] == ["SmolLM2-135M-Instruct", "small", "embed"]
    assert [s.preload for s in specs] == [True, None, None]
    # Weights, KV cache and the worker's base, in MiB.
    assert specs[1].estimate_mb() == 3 + 64 + WORKER_BASE_MB


def test_a_models_dir_serves_each_gguf_and_model_folder(tmp_path: Path):
    gguf(tmp_path, "b.gguf")
    gguf(tmp_path, "big-00001-of-00002.gguf")
    gguf(tmp_path, "big-00002-of-00002.gguf")  # read with the first part
    gguf(tmp_path, "mmproj-b.gguf")  # a vision projector, not a model
    hf_folder(tmp_path, "a")
    (tmp_path / "notes").mkdir()
    specs = build_catalog([], str(tmp_path), None, DEFAULTS)
    assert [Path(s.path or "").name for s in specs] == ["a", "b.gguf", "big-00001-of-00002.gguf"]
    with pytest.raises(ValueError, match=r"holds no \.gguf file and no model folder"):
        build_catalog([], str(tmp_path / "notes"), None, DEFAULTS)


def test_a_models_file_sets_names_options_ttl_pin_and_preload(tmp_path: Path):
    gguf(tmp_path, "chat.gguf")
    hf_folder(tmp_path, "embed")
    models = tmp_path / "models.toml"
    models.write_text(
        """
[defaults]
kv_cache_mb = 32
ttl = 600

[[model]]
path = "chat.gguf"
name = "chat"
aliases = ["claude-*"]
max-model-len = 4096
pinned = true

[[model]]
path = "embed"
pooling = "mean"
preload = true
ttl = 5
"""
    )
    chat, embed = build_catalog([], None, str(models), DEFAULTS)
    assert chat.path == str(tmp_path / "chat.gguf") and chat.names == ("chat", ("claude-*",))
    assert (chat.engine.max_model_len, chat.engine.kv_cache_mb, chat.ttl_s) == (4096, 32, 600)
    assert chat.pinned and not chat.preload  # a file that says which preloads is obeyed
    assert (embed.engine.pooling, embed.ttl_s, embed.preload) == ("mean", 5.0, True)
    assert embed.names == ("embed", ())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('path = "x.gguf"\nmax_seqz = 4', "unknown key 'max_seqz'; a model takes:"),
        ('path = "x.gguf"\nmax_seqs = "4"', "max_seqs must be int, got '4'"),
        ('path = "x.gguf"\npinned = 1', "pinned must be true or false, got 1"),
        ('path = "x.gguf"\nttl = -1', "ttl must be > 0 seconds, got -1.0"),
        ('path = "x.gguf"\nkv_cache_dtype = "q4"', "kv_cache_dtype"),
        ('name = "x"', "path is required"),
        ('path = "missing.gguf"', "missing.gguf: no such file or folder"),
        ('path = "x.gguf"\nname = "d"\n[[model]]\npath = "x.gguf"\nname = "d"', "'d' is given"),
    ],
)
def test_a_models_file_names_what_it_refuses(tmp_path: Path, body: str, message: str):
    gguf(tmp_path, "x.gguf")
    models = tmp_path / "models.toml"
    models.write_text("[[model]]\n" + body)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("*", r"\*")):
        build_catalog([], None, str(models), DEFAULTS)


def test_one_served_name_cannot_name_several_models(tmp_path: Path):
    named = ModelSpec(None, EngineOptions(served_model_name=("mine",)))
    with pytest.raises(ValueError, match="names one model; with several"):
        build_catalog(["default", gguf(tmp_path, "x.gguf")], None, None, named)


def test_the_plan_gives_each_model_its_workers_and_the_gateway_its_catalog(tmp_path: Path):
    argv = ["serve", "--model", "default", gguf(tmp_path, "x.gguf"), "--workers", "2"]
    plan = serve_plan(build_parser().parse_args([*argv, "--memory-budget-mb", "8000"]))
    catalog = plan.catalog()
    assert [m.name for m in catalog.models] == ["SmolLM2-135M-Instruct", "x"]
    assert [m.preload for m in catalog.models] == [True, False]
    assert catalog.budget_mb == 8000 and len(plan.workers) == 4
    parsed = [worker_cli.build_parser().parse_args(c.argv) for c in plan.models[1].commands]
    assert [a.model for a in parsed] == [str(tmp_path / "x.gguf")] * 2
    assert [a.worker_id for a in parsed] == ["x-worker-0", "x-worker-1"]
    assert worker_cli.build_parser().parse_args(plan.workers[0].argv).model is None


def test_the_documented_models_file_reads_as_it_says(tmp_path: Path):
    """docs/MODELS.md's example, its files stood in for by empty ones."""
    doc = (Path(__file__).parents[2] / "docs" / "MODELS.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    hf_folder(tmp_path, "qwen3-embedding-0.6b")
    gguf(tmp_path, "Qwen3-Reranker-0.6B-Q8_0.gguf")
    models = tmp_path / "models.toml"
    models.write_text(example)
    chat, embed, rerank = build_catalog([], None, str(models), DEFAULTS)
    assert chat.path is None and chat.names == ("chat", ("claude-*", "gpt-*"))
    assert (chat.engine.max_model_len, chat.engine.rope_scaling) == (32768, "yarn")
    assert chat.pinned and chat.preload and chat.ttl_s == 900
    assert (embed.names[0], embed.engine.kv_cache_mb, embed.preload) == ("embed", 512, None)
    assert (rerank.names[0], rerank.engine.kv_cache_mb) == ("rerank", 128)


def test_the_readmes_models_file_reads_too(tmp_path: Path):
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    models = tmp_path / "models.toml"
    models.write_text(readme.split("```toml\n", 1)[1].split("```", 1)[0])
    hf_folder(tmp_path, "qwen3-embedding")
    chat, embed = build_catalog([], None, str(models), DEFAULTS)
    assert chat.names == ("chat", ("claude-*",)) and chat.pinned and chat.ttl_s == 900
    assert embed.engine.kv_cache_mb == 128 and embed.ttl_s == 900
