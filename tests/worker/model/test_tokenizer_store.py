"""A GGUF's tokenizer is converted once per tokenizer, not once per file: a model's other
quantizations copy the stored conversion."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.worker.model_factory import hf_model, write_gguf
from worker.model import tokenizer_store
from worker.model.gguf_header import read_header
from worker.model.model_dir import resolve_model_dir


@pytest.fixture
def conversions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files whose tokenizer was converted (not copied), in a private cache."""
    monkeypatch.setenv("ASTRAI_CACHE_DIR", str(tmp_path / "cache"))
    converted: list[Path] = []
    convert = tokenizer_store.save_gguf_tokenizer

    def counting(gguf_path: Path, folder: Path) -> None:
        converted.append(gguf_path)
        convert(gguf_path, folder)

    monkeypatch.setattr(tokenizer_store, "save_gguf_tokenizer", counting)
    return converted


def tokenizer_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.name.startswith("tokenizer")}


def test_a_models_quantizations_convert_its_tokenizer_once(tmp_path, conversions):
    model = hf_model("llama")
    f32 = write_gguf(model, tmp_path / "m.F32.gguf")
    q8 = write_gguf(model, tmp_path / "m.Q8_0.gguf", {"attn_q.weight": "Q8_0"})
    assert read_header(f32).tokenizer_digest == read_header(q8).tokenizer_digest
    first, second = resolve_model_dir(f32), resolve_model_dir(q8)
    assert first != second  # each file has its own folder (config, source) ...
    assert conversions == [f32]  # ... and the second copied the first's tokenizer
    assert tokenizer_files(second) == tokenizer_files(first)
    assert "tokenizer.json" in tokenizer_files(second)
    assert not (second / tokenizer_store.COMPLETE).exists()


@pytest.mark.slow  # a second conversion, ~6 s: `make test` only
def test_another_architecture_converts_its_own(tmp_path, conversions):
    # The same byte-level vocabulary: the architecture picks transformers' converter.
    llama = write_gguf(hf_model("llama"), tmp_path / "llama.gguf")
    qwen2 = write_gguf(hf_model("qwen2"), tmp_path / "qwen2.gguf")
    assert read_header(llama).tokenizer_digest != read_header(qwen2).tokenizer_digest
    resolve_model_dir(llama), resolve_model_dir(qwen2)
    assert conversions == [llama, qwen2]


def test_the_digest_covers_the_tokenizer_keys_only(tmp_path):
    from gguf import GGUFReader, GGUFWriter

    source = write_gguf(hf_model("llama"), tmp_path / "m.gguf")
    reader = GGUFReader(source)

    def rewritten(name: str, template: str, context: int) -> Path:
        writer = GGUFWriter(str(tmp_path / name), "llama")
        for field in reader.fields.values():
            if field.name.startswith("tokenizer.") and field.name != "tokenizer.chat_template":
                writer.add_key_value(field.name, field.contents(), field.types[0], field.types[-1])
        writer.add_chat_template(template)
        writer.add_context_length(context)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.close()
        return tmp_path / name

    base = read_header(rewritten("a.gguf", "{{ messages }}", 64)).tokenizer_digest
    assert read_header(rewritten("b.gguf", "{{ messages }}", 128)).tokenizer_digest == base
    assert read_header(rewritten("c.gguf", "{{ message }}", 64)).tokenizer_digest != base
