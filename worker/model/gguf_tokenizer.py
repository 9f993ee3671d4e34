"""Save a GGUF file's tokenizer as a Hugging Face tokenizer folder (transformers' conversion),
in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from worker.model.gguf_tensors import GgufFileError

# The conversion takes ~1 s for a 49k-token vocabulary, a few for 256k; a bound, not a goal.
CONVERSION_TIMEOUT_S = 600
# The child's exit status when the file's tokenizer cannot be read (its message on stderr).
UNREADABLE = 3


def save_gguf_tokenizer(gguf_path: Path, folder: Path) -> None:
    """Write the tokenizer of `gguf_path` (`tokenizer.ggml.*`, `tokenizer.chat_template`) into
    `folder`. Raises GgufFileError naming the file and the cause where it cannot be read.

    In a child process, once per file: transformers (its import, ~30 MiB and half a second)
    and the conversion's vocabularies are then never part of a worker, which reads the saved
    folder with the tokenizers library alone (worker/text/tokenizer_folder.py).
    """
    argv = [sys.executable, "-m", __name__, str(gguf_path), str(folder)]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=CONVERSION_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise GgufFileError(
            f"{gguf_path}: converting its tokenizer took over {CONVERSION_TIMEOUT_S} s"
        ) from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        cause = message[-1] if message else f"exit status {done.returncode}"
        if done.returncode == UNREADABLE:
            raise GgufFileError(cause)
        raise GgufFileError(f"{gguf_path}: converting its tokenizer failed ({cause})")


def _convert(gguf_path: Path, folder: Path) -> None:
    """Through transformers' generic TokenizersBackend, not AutoTokenizer: to pick a class,
    AutoTokenizer first reads every metadata array of the file with the gguf package's reader
    (for a 49k-token vocabulary 7 s more), and the model-specific classes (GemmaTokenizer,
    Qwen2Tokenizer) hold the same converted tokenizer; what is written for the default model
    is byte for byte the same."""
    from transformers import TokenizersBackend

    try:
        tokenizer = TokenizersBackend.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name
        )
    except (ValueError, KeyError, OSError, TypeError) as exc:
        print(f"{gguf_path}: its tokenizer cannot be read ({exc})", file=sys.stderr)
        raise SystemExit(UNREADABLE) from None
    tokenizer.save_pretrained(str(folder))


if __name__ == "__main__":
    _convert(Path(sys.argv[1]), Path(sys.argv[2]))
