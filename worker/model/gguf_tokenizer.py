"""Save a GGUF file's tokenizer as a Hugging Face tokenizer folder (transformers' conversion)."""

from __future__ import annotations

from pathlib import Path

from worker.machine.heap import release_freed_heap
from worker.model.gguf_tensors import GgufFileError


def save_gguf_tokenizer(gguf_path: Path, folder: Path) -> None:
    """Write the tokenizer of `gguf_path` (`tokenizer.ggml.*`, `tokenizer.chat_template`) into
    `folder`. Raises GgufFileError naming the file and the cause where it cannot be read.

    Through transformers' generic TokenizersBackend, not AutoTokenizer: to pick a class,
    AutoTokenizer first reads every metadata array of the file with the gguf package's reader
    (for a 49k-token vocabulary 7 s and a transient 150 MiB, which stayed in a worker's peak
    RSS), and the model-specific classes (GemmaTokenizer, Qwen2Tokenizer) hold the same
    converted tokenizer; what is written for the default model is byte for byte the same.
    """
    from transformers import TokenizersBackend

    try:
        tokenizer = TokenizersBackend.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name
        )
    except (ValueError, KeyError, OSError, TypeError) as exc:
        raise GgufFileError(f"{gguf_path}: its tokenizer cannot be read ({exc})") from exc
    tokenizer.save_pretrained(str(folder))
    del tokenizer
    release_freed_heap()  # the conversion's vocabularies, freed: not the worker's to keep
