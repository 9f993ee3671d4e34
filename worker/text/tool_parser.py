"""Tool calls read out of the output text as it streams, into per-call deltas.

The grammar (common/tool_calls.py) guarantees the shape: either plain text, or calls written
`<tool_call>{"name":"…","arguments":{…}}</tool_call>` one per line, compact JSON with the
name first. A call's id and name go out as soon as its name is complete, then its arguments
text as it arrives; plain text goes out as content.
"""

from __future__ import annotations

import json
import uuid

from common.token_output import ToolCallDelta
from common.tool_calls import CALL_CLOSE, CALL_OPEN

_HEAD = '{"name":'
_ARGUMENTS_KEY = ',"arguments":'


class ToolCallParser:
    """Feed output text in order; get back (content text, tool call deltas)."""

    def __init__(self) -> None:
        self.num_calls = 0
        self._mode = "start"  # start | text | head | arguments | tail
        self._pending = ""  # text not yet handed out
        self._depth = 0
        self._in_string = self._escaped = False

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        self._pending += text
        content, deltas = "", list[ToolCallDelta]()
        while self._pending:
            before = (self._mode, len(self._pending))
            if self._mode == "text":
                content, self._pending = content + self._pending, ""
            elif self._mode == "start":
                self._start()
            elif self._mode == "head":
                self._head(deltas)
            elif self._mode == "arguments":
                self._arguments(deltas)
            else:
                self._tail()
            if (self._mode, len(self._pending)) == before:
                break  # waiting for more text
        return content, deltas

    @property
    def between_calls(self) -> bool:
        """At least one call is complete and the next has not begun."""
        return self.num_calls > 0 and self._mode == "start" and not self._pending.strip("\n")

    def flush(self) -> str:
        """At the end: whatever was held back and is not part of a call, as content."""
        held, self._pending = self._pending, ""
        return held if self._mode in ("start", "text") and not self.num_calls else ""

    def _start(self) -> None:
        text = self._pending.lstrip("\n")
        if text.startswith(CALL_OPEN):
            self._pending, self._mode = text[len(CALL_OPEN) :], "head"
        elif not CALL_OPEN.startswith(text):
            self._mode = "text" if self.num_calls == 0 else "tail"
            if self._mode == "tail":  # after the calls only separators may follow
                self._pending = ""

    def _head(self, deltas: list[ToolCallDelta]) -> None:
        text = self._pending
        at = text.find(_ARGUMENTS_KEY)
        if not text.startswith(_HEAD) or at < 0:
            return
        name = json.loads(text[len(_HEAD) : at])
        deltas.append(ToolCallDelta(self.num_calls, f"{uuid.uuid4().hex[:24]}", name))
        self._pending, self._mode = text[at + len(_ARGUMENTS_KEY) :], "arguments"
        self._depth, self._in_string, self._escaped = 0, False, False

    def _arguments(self, deltas: list[ToolCallDelta]) -> None:
        text, end = self._pending, None
        for i, char in enumerate(text):
            if self._escaped:
                self._escaped = False
            elif self._in_string:
                self._escaped = char == "\\"
                self._in_string = char != '"'
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth == 0:
                    end = i + 1
                    break
        taken = text if end is None else text[:end]
        if taken:
            deltas.append(ToolCallDelta(self.num_calls, arguments=taken))
        self._pending = "" if end is None else text[end:]
        if end is not None:
            self.num_calls += 1
            self._mode = "tail"

    def _tail(self) -> None:
        text = self._pending
        closing = "}" + CALL_CLOSE
        if text.startswith(closing):
            self._pending, self._mode = text[len(closing) :], "start"
        elif not closing.startswith(text):
            self._pending = ""  # the grammar allows nothing else; drop, never guess
