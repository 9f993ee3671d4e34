"""The rerank prompt: Qwen3-Reranker's own, or a GGUF's rerank template, around one document,
with the query and instruction put in as text, never read as slots."""

from __future__ import annotations

from worker.text.rerank_prompt import (
    DEFAULT_INSTRUCTION,
    QWEN3_TEMPLATE,
    PromptParts,
    RerankPrompt,
    rerank_prompt,
)

SYSTEM = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
)


def test_qwen3s_prompt_is_the_model_cards_with_the_document_between_its_parts():
    prompt = rerank_prompt({})
    assert (prompt.template, prompt.source, prompt.takes_instruction) == (
        QWEN3_TEMPLATE,
        "Qwen3-Reranker's",
        True,
    )
    assert prompt.parts("Where?", None) == PromptParts(
        f"{SYSTEM}<|im_start|>user\n<Instruct>: {DEFAULT_INSTRUCTION}\n<Query>: Where?\n"
        "<Document>: ",
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    )
    assert prompt.parts("q", "").head.endswith("<Instruct>: \n<Query>: q\n<Document>: ")


def test_a_query_or_instruction_holding_slot_names_stays_text():
    head, tail = rerank_prompt({}).parts("{document} {instruction}", "{query}")
    assert head.endswith("<Instruct>: {query}\n<Query>: {document} {instruction}\n<Document>: ")
    assert "{" not in tail


def test_a_gguf_rerank_template_spelling_out_the_default_instruction_takes_another():
    template = "<s>I: " + DEFAULT_INSTRUCTION + " Q: {query} D: {document}</s>"
    prompt = rerank_prompt({"tokenizer.chat_template.rerank": template})
    assert prompt.source == "tokenizer.chat_template.rerank" and prompt.takes_instruction
    assert prompt.parts("q", "find") == PromptParts("<s>I: find Q: q D: ", "</s>")
    assert prompt.parts("q", None).head == f"<s>I: {DEFAULT_INSTRUCTION} Q: q D: "


def test_a_proposed_rerank_instruct_template_comes_first_and_one_without_a_slot_takes_none():
    metadata = {
        "tokenizer.chat_template.rerank": "Q: {query} D: {document}",
        "tokenizer.chat_template.rerank_instruct": "{instruction}|{query}|{document}|",
    }
    assert rerank_prompt(metadata).parts("q", "i") == PromptParts("i|q|", "|")
    plain = rerank_prompt({"tokenizer.chat_template.rerank": "Q: {query} D: {document}"})
    assert not plain.takes_instruction
    # A template without {document} is not a rerank template: Qwen3-Reranker's is used.
    assert rerank_prompt({"tokenizer.chat_template.rerank": "{query}"}).template == QWEN3_TEMPLATE
    assert RerankPrompt("{query}{document}", "x").parts("a", None) == PromptParts("a", "")
