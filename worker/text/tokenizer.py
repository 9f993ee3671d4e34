"""Tokenizer: chat template, encoding, and incremental detokenization that never splits UTF-8."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from worker.errors import RequestError
from worker.text.reasoning_format import reasoning_tags
from worker.text.system_turns import has_later_system_turn, merge_system_turns
from worker.text.tool_prompt import generic_messages, template_messages, template_tools

REPLACEMENT_CHAR = "\ufffd"
# Prompt tokens kept as context when detokenizing the first generated tokens, so that a
# tokenizer that drops a leading space on a lone token still decodes it right.
DETOKENIZE_CONTEXT = 5


class Tokenizer:
    """transformers' tokenizer for a model folder, with the calls the engine needs."""

    def __init__(
        self, model_dir: Path, eos_token_ids: Sequence[int] = (), reasoning_parser: str = "auto"
    ) -> None:
        from transformers import AutoTokenizer, PretrainedConfig

        settings = model_dir / "tokenizer_config.json"
        named = settings.is_file() and "tokenizer_class" in json.loads(settings.read_text())
        # A tokenizer that names its class needs no model config: reading one imports the
        # model's transformers modules (a visible part of every start) to learn what is known
        # already.
        extra = {"config": PretrainedConfig()} if named else {}
        self._hf = AutoTokenizer.from_pretrained(str(model_dir), **extra)
        self._backend = self._hf.backend_tokenizer
        eos = set(eos_token_ids)
        if self._hf.eos_token_id is not None:
            eos.add(self._hf.eos_token_id)
        self.eos_token_ids = frozenset(eos)
        self.vocab_size = len(self._hf)
        # The tags of the model's reasoning, None for a model that does not reason.
        self.reasoning_tags = reasoning_tags(reasoning_parser, self._hf.chat_template)

    @property
    def transformers_tokenizer(self) -> Any:
        return self._hf

    @property
    def has_chat_template(self) -> bool:
        return bool(self._hf.chat_template)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._hf.encode(text, add_special_tokens=add_special_tokens))

    @property
    def template_takes_tools(self) -> bool:
        """The chat template renders `tools` and tool turns itself."""
        return "tools" in (self._hf.chat_template or "")

    def encode_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] = (),
        continue_final: bool = False,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """The model's chat template over `messages` (and `tools`), ending with the
        assistant's turn, or inside the final assistant message when `continue_final`; a
        template without tool support gets the tools in the generic format.
        `template_kwargs` are the template's own variables (enable_thinking)."""
        if not self.has_chat_template:
            raise RequestError("messages need a chat template, and this model has none", "messages")
        extra: dict[str, Any] = dict(template_kwargs or {})
        extra["add_generation_prompt"] = not continue_final
        if continue_final:
            if not messages or messages[-1]["role"] != "assistant" or not messages[-1]["content"]:
                message = "continuing needs the chat to end with a non-empty assistant message"
                raise RequestError(message, "messages")
            extra["continue_final_message"] = True
        if self.template_takes_tools:
            rendered: list[dict[str, Any]] = template_messages(messages)
            if tools:
                extra["tools"] = template_tools(tools)
        else:
            rendered = list(generic_messages(messages, tools))
        try:
            return self._apply_template(rendered, extra)
        except Exception as exc:
            if not template_kwargs:
                raise
            # The same chat renders without them: the request's variables broke the template.
            self._apply_template(
                rendered, {k: v for k, v in extra.items() if k not in template_kwargs}
            )
            message = f"chat_template_kwargs: the chat template fails with them: {exc}"
            raise RequestError(message, "chat_template_kwargs") from None

    def _apply_template(self, messages: list[dict[str, Any]], extra: dict[str, Any]) -> list[int]:
        """The template over `messages`; one that refuses a system turn past the first
        (many raise "roles must alternate") gets the system turns merged into the first."""
        from jinja2 import TemplateError

        try:
            ids = self._hf.apply_chat_template(messages, tokenize=True, return_dict=False, **extra)
        except TemplateError:
            if not has_later_system_turn(messages):
                raise
            merged = merge_system_turns(messages)
            ids = self._hf.apply_chat_template(merged, tokenize=True, return_dict=False, **extra)
        return list(ids)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._backend.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def detokenizer(
        self, prompt_token_ids: Sequence[int], skip_special_tokens: bool = True
    ) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self, prompt_token_ids, skip_special_tokens)


class IncrementalDetokenizer:
    """Turns one token at a time into text deltas.

    Decodes the window ids[prefix:] and compares it with ids[prefix:read]; the new text
    is released only when it does not end in U+FFFD, i.e. never in the middle of a UTF-8
    character whose bytes span several tokens.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        skip_special_tokens: bool = True,
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._ids = list(prompt_token_ids[-DETOKENIZE_CONTEXT:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)

    def step(self, token_id: int) -> str:
        """The text that `token_id` completes, possibly empty."""
        self._ids.append(token_id)
        return self._release(final=False)

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character decodes as U+FFFD)."""
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        decode = self._tokenizer.decode
        prefix_text = decode(self._ids[self._prefix_offset : self._read_offset], self._skip_special)
        new_text = decode(self._ids[self._prefix_offset :], self._skip_special)
        if len(new_text) <= len(prefix_text):
            return ""
        if new_text.endswith(REPLACEMENT_CHAR) and not final:
            return ""
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        return new_text[len(prefix_text) :]
