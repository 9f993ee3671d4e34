"""Tokenizer: chat template, encoding, and incremental detokenization that never splits UTF-8."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tokenizers
from jinja2 import TemplateError

from worker.errors import RequestError
from worker.text.chat_template import ChatTemplate, ChatTemplateError
from worker.text.reasoning_format import reasoning_tags
from worker.text.system_turns import has_later_system_turn, merge_system_turns
from worker.text.tokenizer_folder import read_tokenizer_folder
from worker.text.tool_prompt import generic_messages, template_messages, template_tools

REPLACEMENT_CHAR = "\ufffd"
# Prompt tokens kept as context when detokenizing the first generated tokens, so that a
# tokenizer that drops a leading space on a lone token still decodes it right.
DETOKENIZE_CONTEXT = 5


class Tokenizer:
    """A model folder's tokenizer (the tokenizers library) and chat template (Jinja, rendered
    as transformers renders it), with the calls the engine needs. transformers itself is not
    imported: a worker's start and memory would carry its modules for nothing."""

    def __init__(
        self,
        model_dir: Path,
        eos_token_ids: Sequence[int] = (),
        reasoning_parser: str = "auto",
        chat_template: str | None = None,
    ) -> None:
        """`chat_template`: a Jinja source used instead of the folder's templates."""
        folder = read_tokenizer_folder(model_dir)  # TokenizerFolderError: a startup error
        if chat_template is not None:
            folder = dataclasses.replace(folder, chat_templates={"default": chat_template})
        self._folder = folder
        self._backend = folder.backend
        eos = set(eos_token_ids)
        if folder.eos_token_id is not None:
            eos.add(folder.eos_token_id)
        self.eos_token_ids = frozenset(eos)
        self.vocab_size = self._backend.get_vocab_size(with_added_tokens=True)
        self._templates: dict[bool, ChatTemplate] = {}
        # The tags of the model's reasoning, None for a model that does not reason.
        self.reasoning_tags = reasoning_tags(reasoning_parser, self.chat_template_source)

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The tokenizers library's tokenizer (grammars are built over its vocabulary)."""
        return self._backend

    @property
    def eos_token_id(self) -> int | None:
        """The tokenizer's own end-of-sequence token (eos_token_ids adds the model's)."""
        return self._folder.eos_token_id

    @property
    def chat_template_source(self) -> str | None:
        return self._folder.chat_template(with_tools=False)

    @property
    def has_chat_template(self) -> bool:
        return bool(self.chat_template_source)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._backend.encode(text, add_special_tokens=add_special_tokens).ids)

    @property
    def template_takes_tools(self) -> bool:
        """The chat template renders `tools` and tool turns itself."""
        return "tools" in (self._folder.chat_template(with_tools=True) or "")

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
        if continue_final and (
            not messages or messages[-1]["role"] != "assistant" or not messages[-1]["content"]
        ):
            message = "continuing needs the chat to end with a non-empty assistant message"
            raise RequestError(message, "messages")
        template_tools_: list[dict[str, Any]] | None = None
        if self.template_takes_tools:
            rendered: list[dict[str, Any]] = template_messages(messages)
            if tools:
                template_tools_ = template_tools(tools)
        else:
            rendered = list(generic_messages(messages, tools))
        variables = dict(template_kwargs or {})
        try:
            return self._apply_template(rendered, template_tools_, continue_final, variables)
        except Exception as exc:
            if not variables:
                raise
            # The same chat renders without them: the request's variables broke the template.
            self._apply_template(rendered, template_tools_, continue_final, {})
            message = f"chat_template_kwargs: the chat template fails with them: {exc}"
            raise RequestError(message, "chat_template_kwargs") from None

    def _template(self, with_tools: bool) -> ChatTemplate:
        """Compiled at first use; encode_chat has checked that the folder has one."""
        if with_tools not in self._templates:
            source = self._folder.chat_template(with_tools) or ""
            self._templates[with_tools] = ChatTemplate(source, self._folder.special_tokens)
        return self._templates[with_tools]

    def _apply_template(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        continue_final: bool,
        variables: dict[str, Any],
    ) -> list[int]:
        """The template over `messages`; one that refuses a system turn past the first
        (many raise "roles must alternate") gets the system turns merged into the first."""
        template = self._template(with_tools=tools is not None)

        def render(chat: list[dict[str, Any]]) -> str:
            return template.render(chat, tools, not continue_final, continue_final, variables)

        try:
            text = render(messages)
        except TemplateError:
            if not has_later_system_turn(messages):
                raise
            text = render(merge_system_turns(messages))
        except ChatTemplateError as exc:
            raise RequestError(str(exc), "messages") from None
        return self.encode(text, add_special_tokens=False)

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
