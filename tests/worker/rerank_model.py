"""Test helper: tiny random-weight Qwen3 rerankers as their files ship (Qwen3-Reranker's causal
LM with its README, a ...ForSequenceClassification head, a GGUF as llama.cpp converts one),
and transformers' own scores of them, the reference ours are held to."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    Qwen3ForCausalLM,
    Qwen3ForSequenceClassification,
)

from tests.worker.embedding_model import randomized, save_with_tokenizer, tiny_qwen3_config
from tests.worker.model_factory import copy_metadata
from worker.text.rerank_prompt import DEFAULT_INSTRUCTION, QWEN3_TEMPLATE


def build_reranker(target: Path, tokenizer_dir: Path, classifier: bool = False) -> Path:
    """A seeded float32 Qwen3 (hidden 64, 2 layers, the default model's tokenizer): a causal
    LM with its own output layer and a README headed as Qwen3-Reranker's (the yes/no form),
    or with `classifier` a Qwen3ForSequenceClassification of one label (config.json names
    it), as Qwen3-Reranker's seq-cls conversions ship."""
    config = tiny_qwen3_config(tie_word_embeddings=False)
    if classifier:
        config.num_labels = 1
        model: PreTrainedModel = Qwen3ForSequenceClassification(config)
    else:
        model = Qwen3ForCausalLM(config)
    save_with_tokenizer(randomized(model.float()), target, tokenizer_dir)
    if not classifier:
        (target / "README.md").write_text("# Qwen3-Reranker-tiny\n\nA test model.\n")
    return target


def reference_model(folder: Path, classifier: bool = False) -> PreTrainedModel:
    auto = AutoModelForSequenceClassification if classifier else AutoModelForCausalLM
    return auto.from_pretrained(str(folder), dtype=torch.float32).eval()


def reference_prompt(query: str, document: str, instruction: str | None = None) -> str:
    """Qwen3-Reranker's prompt as its model card writes it."""
    task = DEFAULT_INSTRUCTION if instruction is None else instruction
    return (
        QWEN3_TEMPLATE.replace("{instruction}", task)
        .replace("{query}", query)
        .replace("{document}", document)
    )


def reference_ids(
    folder: Path, query: str, document: str, instruction: str | None = None
) -> list[int]:
    """transformers' tokenizer of the whole prompt, in one piece."""
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    ids: list[int] = tokenizer(reference_prompt(query, document, instruction))["input_ids"]
    return ids


def reference_score(model: PreTrainedModel, token_ids: list[int], yes: int, no: int) -> float:
    """The model card's score: softmax over the last position's "no" and "yes" logits, the
    second; a classifier's: the sigmoid of its one logit."""
    with torch.inference_mode():
        logits = model(torch.tensor([token_ids])).logits.float()
    if isinstance(model, Qwen3ForSequenceClassification):
        return float(torch.sigmoid(logits[0, 0]))
    last = logits[0, -1]
    return float(torch.softmax(torch.stack([last[no], last[yes]]), dim=0)[1])


def write_rank_gguf(
    model: PreTrainedModel, f32_gguf: Path, target: Path, yes: int, no: int
) -> Path:
    """`f32_gguf` (the model as write_gguf lays it out) as llama.cpp's converter writes a
    Qwen3-Reranker: pooling type RANK, a cls.output.weight of the yes and no rows of the
    output layer (in that order), which takes the output layer's place, and the prompt as a
    "rerank" chat template with the default instruction spelled out."""
    from gguf import GGUFReader, GGUFWriter, PoolingType

    reader = GGUFReader(str(f32_gguf))
    writer = GGUFWriter(str(target), "qwen3")
    copy_metadata(reader, writer)
    writer.add_pooling_type(PoolingType.RANK)
    template = QWEN3_TEMPLATE.replace("{instruction}", DEFAULT_INSTRUCTION)
    writer.add_chat_template([{"name": "rerank", "template": template}])
    for tensor in reader.tensors:
        if tensor.name != "output.weight":
            writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_dtype=tensor.tensor_type)
    head = model.lm_head.weight.detach()
    writer.add_tensor("cls.output.weight", torch.stack([head[yes], head[no]]).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target
