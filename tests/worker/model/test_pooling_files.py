"""A model's pooling from its files: sentence-transformers' modules.json and Pooling config,
a GGUF's pooling_type, a reranker's config.json, LogitScore or README, and `--pooling` over
them; what is not served is none, with why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFWriter, PoolingType

from worker.model.model_dir import GGUF_SOURCE
from worker.model.pooling import ModelPooling, Pooling
from worker.model.pooling_files import model_pooling

ST = "sentence_transformers.models."
TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": f"{ST}Transformer"}
POOLING = {"idx": 1, "name": "1", "path": "1_Pooling", "type": f"{ST}Pooling"}
NORMALIZE = {"idx": 2, "name": "2", "path": "2_Normalize", "type": f"{ST}Normalize"}
MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "lasttoken")


def st_folder(
    folder: Path, modules: list[dict[str, Any]], *modes: str, pooling_path: str = "1_Pooling"
) -> Path:
    """A model folder with sentence-transformers' files: `modules`, and a Pooling config
    with `modes` on (the others off)."""
    (folder / "config.json").write_text("{}")
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / pooling_path).mkdir()
    config = {"word_embedding_dimension": 64}
    config |= {f"pooling_mode_{mode}": mode in modes for mode in MODES}
    (folder / pooling_path / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("modules", "mode", "expected"),
    [
        ([TRANSFORMER, POOLING, NORMALIZE], "lasttoken", ModelPooling(Pooling.LAST, True)),
        ([TRANSFORMER, POOLING], "mean_tokens", ModelPooling(Pooling.MEAN, False)),
        ([TRANSFORMER, POOLING, NORMALIZE], "cls_token", ModelPooling(Pooling.CLS, True)),
    ],
)
def test_a_sentence_transformers_folder_states_its_pooling_and_normalization(
    tmp_path: Path, modules: list[dict[str, Any]], mode: str, expected: ModelPooling
):
    stated = model_pooling(st_folder(tmp_path, modules, mode))
    assert (stated.pooling, stated.normalize) == (expected.pooling, expected.normalize)
    assert stated.reason == "sentence-transformers modules.json"


def test_the_pooling_config_is_read_where_modules_json_puts_it(tmp_path: Path):
    pooling = {**POOLING, "path": "pooling"}
    folder = st_folder(tmp_path, [TRANSFORMER, pooling], "mean_tokens", pooling_path="pooling")
    assert model_pooling(folder).pooling is Pooling.MEAN


@pytest.mark.parametrize(
    ("modules", "modes", "reason"),
    [
        (
            [TRANSFORMER, POOLING, {"type": f"{ST}Dense", "path": "2_Dense"}],
            ("mean_tokens",),
            f"its modules.json lists {ST}Dense, not served here",
        ),
        ([TRANSFORMER], ("mean_tokens",), "its modules.json lists no Pooling module"),
        (
            [TRANSFORMER, POOLING],
            ("max_tokens",),
            "its Pooling config sets pooling_mode_max_tokens, not served here",
        ),
        (
            [TRANSFORMER, POOLING],
            ("cls_token", "mean_tokens"),
            "its Pooling config sets pooling_mode_cls_token, pooling_mode_mean_tokens, "
            "not served here",
        ),
        ([TRANSFORMER, POOLING], (), "its Pooling config sets no mode, not served here"),
    ],
)
def test_what_this_engine_does_not_compute_is_no_pooling_with_the_reason(
    tmp_path: Path, modules: list[dict[str, Any]], modes: tuple[str, ...], reason: str
):
    assert model_pooling(st_folder(tmp_path, modules, *modes)) == ModelPooling(None, True, reason)


def test_a_folder_without_sentence_transformers_files_has_none(tiny_model_dir: Path):
    reason = "its folder has no sentence-transformers modules.json"
    assert model_pooling(tiny_model_dir) == ModelPooling(None, True, reason)


def gguf_folder(tmp_path: Path, pooling_type: int | None) -> Path:
    """A model folder whose weights are a GGUF (a header only) with `pooling_type`."""
    path = tmp_path / "model.gguf"
    writer = GGUFWriter(str(path), "qwen3")
    if pooling_type is not None:
        writer.add_pooling_type(PoolingType(pooling_type))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / GGUF_SOURCE).write_text(json.dumps({"file": str(path)}))
    return folder


@pytest.mark.parametrize(
    ("pooling_type", "expected"),
    [
        (1, ModelPooling(Pooling.MEAN, True, "qwen3.pooling_type")),
        (2, ModelPooling(Pooling.CLS, True, "qwen3.pooling_type")),
        (3, ModelPooling(Pooling.LAST, True, "qwen3.pooling_type")),
        (0, ModelPooling(None, True, "its GGUF qwen3.pooling_type is 0, not an embedding's")),
        (4, ModelPooling(Pooling.RANK, False, "qwen3.pooling_type")),  # a reranker's
        (None, ModelPooling(None, True, "its GGUF metadata has no qwen3.pooling_type")),
    ],
)
def test_a_gguf_states_its_pooling_in_ggmls_enum(
    tmp_path: Path, pooling_type: int | None, expected: ModelPooling
):
    assert model_pooling(gguf_folder(tmp_path, pooling_type)) == expected


def test_the_pooling_option_overrides_the_files_and_keeps_their_normalization(
    tmp_path: Path, tiny_model_dir: Path
):
    unnormalized = st_folder(tmp_path, [TRANSFORMER, POOLING], "mean_tokens")
    assert model_pooling(unnormalized, "last") == ModelPooling(Pooling.LAST, False, "--pooling")
    # A model whose files state no pooling is normalized, as OpenAI's vectors are.
    assert model_pooling(tiny_model_dir, "cls") == ModelPooling(Pooling.CLS, True, "--pooling")


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        (
            {"config.json": {"architectures": ["Qwen3ForSequenceClassification"]}},
            "config.json architectures: Qwen3ForSequenceClassification",
        ),
        (
            {
                "config.json": {"architectures": ["Qwen3ForCausalLM"]},
                "modules.json": [
                    TRANSFORMER,
                    {"path": "1_LogitScore", "type": f"{ST}cross_encoder.LogitScore"},
                ],
            },
            "sentence-transformers modules.json: LogitScore",
        ),
        (
            {"config.json": {"architectures": ["Qwen3ForCausalLM"]}, "README.md": "x"},
            "README.md reads '# Qwen3-Reranker'",
        ),
    ],
)
def test_a_folder_states_a_reranker_by_its_head_its_score_module_or_its_readme(
    tmp_path: Path, files: dict[str, Any], reason: str
):
    for name, content in files.items():
        text = "# Qwen3-Reranker-0.6B\n" if name == "README.md" else json.dumps(content)
        (tmp_path / name).write_text(text)
    assert model_pooling(tmp_path) == ModelPooling(Pooling.RANK, False, reason)
    # --pooling overrides it: the reranker then embeds, normalized.
    assert model_pooling(tmp_path, "last") == ModelPooling(Pooling.LAST, True, "--pooling")


def test_pooling_rank_makes_any_model_a_reranker_whose_scores_are_not_scaled(
    tmp_path: Path, tiny_model_dir: Path
):
    embedder = st_folder(tmp_path, [TRANSFORMER, POOLING, NORMALIZE], "lasttoken")
    for folder in (embedder, tiny_model_dir):
        assert model_pooling(folder, "rank") == ModelPooling(Pooling.RANK, False, "--pooling")
