"""A model's Jinja chat template, rendered as transformers' apply_chat_template renders it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Names a message's reasoning arrives under; templates read `reasoning_content` (most) or
# `thinking` (gpt-oss), so a message carrying one gets the others too, as transformers does.
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
# Appended to the text being continued, so that the rendered chat can be cut right after it.
# Its trailing space tells whether the template trimmed the text: then so is the cut.
CONTINUE_MARK = "<|astrai continues the final message here|> "


class ChatTemplateError(ValueError):
    """The chat cannot be rendered as asked (nothing to continue, text the template drops)."""


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}…{% endgeneration %}` (templates that mark the assistant's tokens
    for training) renders its body unchanged: serving never asks for that mask."""

    tags = {"generation"}  # noqa: RUF012 (jinja reads it from the class)

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


class _TemplateNamespace(jinja2.utils.Namespace):
    """Jinja's namespace, refusing underscore names: a template is untrusted code."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        self, values = args[0], dict(*args[1:], **kwargs)
        for name in values:
            _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, values)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check(name)  # a namespace hides its attributes from itself
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"a chat template may not set {name!r}: names starting with '_' are refused"
            )


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML, which would change the prompt.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["namespace"] = _TemplateNamespace
    return env


def read_template_file(path: str) -> str:
    """A chat template file's source; ValueError naming the file where it cannot be read or
    is not a Jinja template."""
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"chat template {path}: cannot be read ({exc})") from None
    try:
        _environment().parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"chat template {path}: line {exc.lineno}: {exc.message}") from None
    return source


class ChatTemplate:
    """One compiled template, with the special tokens' text it sees as variables
    (`bos_token`, `eos_token`, …). Rendering raises jinja2.TemplateError where the template
    itself refuses the chat, ChatTemplateError where continuing cannot work."""

    def __init__(self, source: str, special_tokens: Mapping[str, str]) -> None:
        self._template = _environment().from_string(source)
        self._special_tokens = dict(special_tokens)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        continue_final: bool = False,
        variables: Mapping[str, Any] | None = None,
    ) -> str:
        """The chat as text; with `continue_final`, cut right after the final message's text
        (its end-of-turn markup dropped) so that the model continues it."""
        chat = [_with_reasoning_aliases(m) for m in messages]
        continued = ""
        if continue_final:
            continued = _mark_final_text(chat)
        context = {**self._special_tokens, **(variables or {})}
        context.update(
            messages=chat,
            tools=list(tools) if tools is not None else None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
        )
        rendered = self._template.render(**context)
        if not continue_final:
            return rendered
        at = rendered.rfind(CONTINUE_MARK.rstrip())
        if at < 0 or continued.strip() not in rendered[:at]:
            raise ChatTemplateError(
                "the chat template drops part of the final assistant message, which therefore "
                "cannot be continued"
            )
        kept_spacing = rendered.startswith(CONTINUE_MARK, at)
        return rendered[:at] if kept_spacing else rendered[:at].rstrip()


def _with_reasoning_aliases(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message without None values (templates test for a key, not for None), its
    reasoning under every name templates read."""
    plain = {key: value for key, value in message.items() if value is not None}
    reasoning = next((plain[key] for key in REASONING_FIELDS if key in plain), None)
    if reasoning is not None:
        plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
    return plain


def _mark_final_text(chat: list[dict[str, Any]]) -> str:
    """Append CONTINUE_MARK to the final message's text (its last text part); the text."""
    if not chat:
        raise ChatTemplateError("there is no final message to continue")
    final = chat[-1] = dict(chat[-1])
    content = final.get("content")
    if isinstance(content, str):
        final["content"] = content + CONTINUE_MARK
        return content
    if isinstance(content, list):
        parts = [dict(part) if isinstance(part, Mapping) else part for part in content]
        for part in reversed(parts):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                text: str = part["text"]
                part["text"] = text + CONTINUE_MARK
                final["content"] = parts
                return text
    raise ChatTemplateError("the final message has no text to continue")
