"""A Hugging Face tokenizer folder read with the tokenizers library: vocabulary, special
tokens, chat templates (the files and precedence transformers uses)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tokenizers

# The named special tokens a chat template sees as variables.
SPECIAL_TOKEN_NAMES = (
    *("bos_token", "eos_token", "unk_token", "sep_token"),
    *("pad_token", "cls_token", "mask_token"),
)
TEMPLATE_FILE = "chat_template.jinja"
TEMPLATE_DIR = "additional_chat_templates"


class TokenizerFolderError(ValueError):
    """The folder holds no tokenizer this server can read."""


@dataclass(frozen=True)
class TokenizerFolder:
    backend: tokenizers.Tokenizer
    # Special token names (bos_token, …) to their text.
    special_tokens: dict[str, str]
    # Template name ("default", "tool_use", …) to its Jinja source; empty: no template.
    chat_templates: dict[str, str]

    @property
    def eos_token_id(self) -> int | None:
        eos = self.special_tokens.get("eos_token")
        return None if eos is None else self.backend.token_to_id(eos)

    def chat_template(self, with_tools: bool) -> str | None:
        """The template a chat renders through: "tool_use" where there are tools and the
        folder names one, else "default" (or the only one there is)."""
        if with_tools and "tool_use" in self.chat_templates:
            return self.chat_templates["tool_use"]
        if "default" in self.chat_templates:
            return self.chat_templates["default"]
        if len(self.chat_templates) == 1:
            return next(iter(self.chat_templates.values()))
        return None


def read_tokenizer_folder(folder: Path) -> TokenizerFolder:
    """The tokenizer saved in `folder` (tokenizer.json beside tokenizer_config.json)."""
    settings = _settings(folder)
    backend = _backend(folder, settings)
    special = {
        name: text
        for name in SPECIAL_TOKEN_NAMES
        if (text := _token_text(settings.get(name))) is not None
    }
    return TokenizerFolder(backend, special, _chat_templates(folder, settings))


def _settings(folder: Path) -> dict[str, Any]:
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise TokenizerFolderError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(settings, dict):
        raise TokenizerFolderError(f"{path}: expected a JSON object")
    return settings


def _backend(folder: Path, settings: dict[str, Any]) -> tokenizers.Tokenizer:
    path = folder / "tokenizer.json"
    if not path.is_file():
        slow = (
            " (only a SentencePiece tokenizer.model)"
            if (folder / "tokenizer.model").is_file()
            else ""
        )
        raise TokenizerFolderError(
            f"{folder}: no tokenizer.json{slow}; this server reads fast tokenizers, which "
            "transformers writes: AutoTokenizer.from_pretrained(folder).save_pretrained(folder)"
        )
    try:
        backend = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust library raises its own Exception type
        raise TokenizerFolderError(f"{path}: cannot be read ({exc})") from None
    # Requests are encoded whole: a saved truncation or padding setting is for training.
    backend.no_truncation()
    backend.no_padding()
    _add_missing_tokens(backend, settings)
    return backend


def _add_missing_tokens(backend: tokenizers.Tokenizer, settings: dict[str, Any]) -> None:
    """Tokens tokenizer_config.json adds that tokenizer.json lacks (older saves kept them
    there only); where the id does not come out as the file says, the file is refused."""
    for key, entry in (settings.get("added_tokens_decoder") or {}).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            continue
        content, token_id = entry["content"], int(key)
        if backend.token_to_id(content) is not None:
            continue
        token = tokenizers.AddedToken(
            content,
            single_word=bool(entry.get("single_word", False)),
            lstrip=bool(entry.get("lstrip", False)),
            rstrip=bool(entry.get("rstrip", False)),
            normalized=bool(entry.get("normalized", not entry.get("special", False))),
            special=bool(entry.get("special", False)),
        )
        backend.add_tokens([token])
        if backend.token_to_id(content) != token_id:
            raise TokenizerFolderError(
                f"added token {content!r} is id {token_id} in tokenizer_config.json, but the "
                f"vocabulary gives it {backend.token_to_id(content)}"
            )


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: its text, or an AddedToken."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _chat_templates(folder: Path, settings: dict[str, Any]) -> dict[str, str]:
    """Template files (chat_template.jinja, additional_chat_templates/NAME.jinja) take
    precedence over the templates tokenizer_config.json holds."""
    files: dict[str, str] = {}
    if (folder / TEMPLATE_FILE).is_file():
        files["default"] = (folder / TEMPLATE_FILE).read_text(encoding="utf-8")
    if (folder / TEMPLATE_DIR).is_dir():
        for path in sorted((folder / TEMPLATE_DIR).glob("*.jinja")):
            files[path.stem] = path.read_text(encoding="utf-8")
    if files:
        return files
    saved = settings.get("chat_template")
    if isinstance(saved, str):
        return {"default": saved}
    if isinstance(saved, list):
        return {
            str(item["name"]): str(item["template"])
            for item in saved
            if isinstance(item, dict) and "name" in item and "template" in item
        }
    return {}
