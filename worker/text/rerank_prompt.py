"""RerankPrompt: the text a reranker reads for a query and one document, in shared pieces."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

# Qwen3-Reranker's prompt, as its model card builds it: a system turn that asks for "yes" or
# "no", the user turn, and an assistant turn with an empty thought, where the next token is
# the answer whose two logits make the score.
QWEN3_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
    "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
)
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
# llama.cpp's converter writes Qwen3-Reranker's prompt into a GGUF as a chat template named
# "rerank", {query} and {document} in it and the default instruction spelled out; a proposed
# "rerank_instruct" template holds {instruction} too.
_GGUF_TEMPLATES = ("tokenizer.chat_template.rerank_instruct", "tokenizer.chat_template.rerank")
_SLOTS = re.compile(r"\{(query|instruction)\}")
DOCUMENT = "{document}"


class PromptParts(NamedTuple):
    """A prompt is head + document + tail: every document of one query shares the head."""

    head: str
    tail: str


@dataclass(frozen=True)
class RerankPrompt:
    """A template with {query} and {document} (and {instruction} where it takes one)."""

    template: str
    source: str  # where the template came from, for the log

    @property
    def takes_instruction(self) -> bool:
        return "{instruction}" in self.template

    def parts(self, query: str, instruction: str | None) -> PromptParts:
        """The head and tail around a document. The query and instruction are put in one
        pass, so neither's text is read as a slot; the template is split at {document}
        first, so a query holding "{document}" stays text."""
        task = DEFAULT_INSTRUCTION if instruction is None else instruction
        values = {"query": query, "instruction": task}
        head, _, tail = self.template.partition(DOCUMENT)

        def fill(text: str) -> str:
            return _SLOTS.sub(lambda slot: values[slot.group(1)], text)

        return PromptParts(fill(head), fill(tail))


def rerank_prompt(gguf_metadata: Mapping[str, Any]) -> RerankPrompt:
    """The model's own rerank template where its GGUF's metadata holds one (an empty
    mapping for a folder), else Qwen3-Reranker's."""
    for key in _GGUF_TEMPLATES:
        template = gguf_metadata.get(key)
        if isinstance(template, str) and DOCUMENT in template:
            return RerankPrompt(_with_instruction_slot(template), key)
    return RerankPrompt(QWEN3_TEMPLATE, "Qwen3-Reranker's")


def _with_instruction_slot(template: str) -> str:
    """A template that spells out the default instruction takes another in its place."""
    if "{instruction}" in template:
        return template
    return template.replace(DEFAULT_INSTRUCTION, "{instruction}", 1)
