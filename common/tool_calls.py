"""Tool calls as the model writes them, and the grammar that keeps them well-formed.

A model without tool support in its chat template is told (worker/text/tool_prompt.py) to call a
function by writing `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, one per line.
Under tool choice `required` (Anthropic `any`) or a named function the whole answer is such
calls; under `auto` it is either calls or plain text that does not start with `<`, and once a
call has begun the rest of it is constrained. Each call's arguments follow its function's
schema. The gateway compiles this before any work, to refuse a schema it cannot use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import llguidance

from common.structured_output import StructuredOutputError, schema_for

CALL_OPEN, CALL_CLOSE, CALL_SEPARATOR = "<tool_call>", "</tool_call>", "\n"
CHOICES = ("none", "auto", "required")


def tool_call_grammar(
    tools: Sequence[Mapping[str, Any]],
    choice: str | Mapping[str, Any],
    parallel: bool,
    text: Mapping[str, Any] | None = None,
) -> str:
    """The grammar of an answer under `tools` ([{name, parameters, strict}]) and `choice`
    ("auto", "required" or {"name": …}); `text`: the structured-output spec plain answers
    follow under "auto", if any. StructuredOutputError says what cannot be compiled."""
    if isinstance(choice, Mapping):
        named = [t for t in tools if t.get("name") == choice.get("name")]
        if not named:
            raise StructuredOutputError(f"tool_choice names no given tool: {choice.get('name')!r}")
        tools, mode = named, "required"
    else:
        mode = choice
    if mode not in ("auto", "required") or not tools:
        raise StructuredOutputError(f"no grammar for tool choice {mode!r} over {len(tools)} tools")
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["name"]},
                "arguments": tool.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    # Unsupported schema keywords are refused only when every function asks to be strict.
    strict = all(tool.get("strict") is True for tool in tools)
    plain = None if text is None else json.dumps(schema_for(text))
    return _compiled(json.dumps(calls), mode, parallel, strict, plain)


@lru_cache(maxsize=256)
def _compiled(calls: str, mode: str, parallel: bool, strict: bool, plain: str | None) -> str:
    options = {"whitespace_flexible": False, "lenient": not strict}
    schema = {"anyOf": json.loads(calls), "x-guidance": options}
    more = f'("{_lark(CALL_SEPARATOR)}" call)*' if parallel else ""
    rules = [
        f"calls: call {more}",
        f'call: "{_lark(CALL_OPEN)}" arguments "{_lark(CALL_CLOSE)}"',
        f"arguments: %json {json.dumps(schema)}",
    ]
    if mode == "required":
        rules.insert(0, "start: calls")
    else:
        rules.insert(0, "start: calls | plain")
        if plain is None:
            rules.append("plain: /(?s:[^<].*)?/")  # text; it cannot start a call later
        else:
            plain_schema = {**json.loads(plain), "x-guidance": options}
            rules.append(f"plain: %json {json.dumps(plain_schema)}")
    grammar = llguidance.LLMatcher.grammar_from_lark("\n".join(rules))
    error = llguidance.LLMatcher.validate_grammar(grammar, None)
    if error:
        raise StructuredOutputError(error)
    return grammar


def _lark(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
