"""Reranks through the engine on random-weight Qwen3 rerankers: our scores equal transformers'
own (the yes/no form, a classifier head, a GGUF as llama.cpp converts one), in chunks smaller
than the prompts, with the query's tokens computed once for all its documents, no page kept;
what a model cannot rerank is refused with nothing queued."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from transformers import PreTrainedModel

from common.rerank import RerankSettings
from tests.worker.model_factory import hf_model, write_gguf
from tests.worker.rerank_model import (
    build_reranker,
    reference_ids,
    reference_model,
    reference_prompt,
    reference_score,
    write_rank_gguf,
)
from worker.engine.inference_engine import InferenceEngine
from worker.errors import ContextLengthExceeded, RequestError
from worker.model.pooling import Pooling

pytestmark = pytest.mark.slow
TOL = 1e-4
CHUNK = 16  # the prefill token budget: every prompt (~70+ tokens) takes several forwards
QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Paris is the capital of France.",
    "Berlin is the capital of Germany, and has been since 1990.",
    "(a parenthesis first) and digits 12345",
    "",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Path:
    return build_reranker(tmp_path_factory.mktemp("rerank") / "qwen3-rerank", default_model_dir)


@pytest.fixture(scope="module")
def reference(folder: Path) -> PreTrainedModel:
    return reference_model(folder)


def engine(folder: Path, **options: object) -> InferenceEngine:
    # No disk tier: the prefill counts below are this engine's own prefix sharing, not pages
    # another test's engine left on the session's disk folder for the same seeded model.
    defaults = {"dtype": "float32", "kv_cache_mb": 16, "prefill_token_budget": CHUNK}
    defaults["idle_prefill_token_budget"] = CHUNK
    options = {**defaults, "kv_disk_mb": 0, **options}
    return InferenceEngine(folder, **options)


@pytest.fixture(scope="module")
def yes_no(folder: Path) -> Iterator[InferenceEngine]:
    with engine(folder) as running:
        yield running


def answer_ids(engine: InferenceEngine) -> tuple[int, int]:
    vocabulary = engine.tokenizer.backend
    return vocabulary.token_to_id("yes"), vocabulary.token_to_id("no")


def prompt_ids(
    engine: InferenceEngine, documents: list[str], max_tokens_per_doc: int | None = None
) -> list[list[int]]:
    settings = RerankSettings(QUERY, max_tokens_per_doc=max_tokens_per_doc)
    return engine.reranks.token_ids(documents, settings)


def common_prefix(rows: list[list[int]]) -> int:
    """How many leading tokens every row shares."""
    columns = zip(*rows, strict=False)  # as far as the shortest row
    return next((i for i, c in enumerate(columns) if len(set(c)) > 1), min(map(len, rows)))


def test_yes_no_scores_equal_transformers_and_the_query_is_computed_once(
    yes_no: InferenceEngine, folder: Path, reference: PreTrainedModel
):
    assert yes_no.reranks.pooling.pooling is Pooling.RANK
    assert yes_no.reranks.pooling.reason == "README.md reads '# Qwen3-Reranker'"
    before = yes_no.get_stats()
    scores = yes_no.rerank(QUERY, DOCUMENTS)
    stats = yes_no.get_stats()
    ids = prompt_ids(yes_no, DOCUMENTS)
    yes, no = answer_ids(yes_no)
    for document, tokens, score in zip(DOCUMENTS, ids, scores, strict=True):
        assert tokens == reference_ids(folder, QUERY, document)  # the model card's tokens
        assert abs(score - reference_score(reference, tokens, yes, no)) < TOL
    assert len(set(scores)) == len(scores) and all(0 < s < 1 for s in scores)
    # Every prompt starts with the same head (system turn, instruction, query): it is
    # computed for the first document only, whose pages the others read or copy.
    shared = common_prefix(ids)
    assert shared > 40 and all(t[:shared] == ids[0][:shared] for t in ids)
    computed = stats["prefill_tokens"] - before["prefill_tokens"]
    assert computed == shared + sum(len(t) - shared for t in ids)
    assert stats["total_rerank_documents"] - before["total_rerank_documents"] == len(DOCUMENTS)
    assert (stats["kv_pages_in_use"], stats["total_tokens"]) == (0, 0)


def test_an_instruction_and_a_cut_document_score_as_transformers_does(
    yes_no: InferenceEngine, folder: Path, reference: PreTrainedModel
):
    yes, no = answer_ids(yes_no)
    task = "Given a city, find passages about its country"
    [score] = yes_no.rerank(QUERY, DOCUMENTS[:1], instruction=task)
    tokens = reference_ids(folder, QUERY, DOCUMENTS[0], task)
    assert abs(score - reference_score(reference, tokens, yes, no)) < TOL
    [cut] = yes_no.rerank(QUERY, DOCUMENTS[1:2], max_tokens_per_doc=3)
    [full] = prompt_ids(yes_no, DOCUMENTS[1:2])
    [short] = prompt_ids(yes_no, DOCUMENTS[1:2], max_tokens_per_doc=3)
    head = common_prefix(prompt_ids(yes_no, DOCUMENTS[:2]))
    tail = common_prefix([full[::-1], short[::-1]])
    assert short == full[: head + 3] + full[-tail:]  # three of its tokens, then the tail
    assert abs(cut - reference_score(reference, short, yes, no)) < TOL


def test_a_classifier_heads_score_is_the_sigmoid_of_its_logit(
    tmp_path: Path, default_model_dir: Path
):
    folder = build_reranker(tmp_path / "seq-cls", default_model_dir, classifier=True)
    reference = reference_model(folder, classifier=True)
    with engine(folder) as running:
        assert running.reranks.pooling.reason == (
            "config.json architectures: Qwen3ForSequenceClassification"
        )
        assert running.reranks.head is not None
        assert running.reranks.head.source == "score.weight, 1 label(s)"
        scores = running.rerank(QUERY, DOCUMENTS)
        ids = prompt_ids(running, DOCUMENTS)
    for tokens, score in zip(ids, scores, strict=True):
        assert abs(score - reference_score(reference, tokens, 0, 0)) < TOL


def test_a_gguf_converted_as_a_reranker_scores_with_its_cls_output(
    tmp_path: Path, shared_cache: Path
):
    hf = hf_model("qwen3", tie_word_embeddings=False, max_position_embeddings=512)
    yes, no = 121, 110  # the byte tokenizer's "y" and "n": any two rows of the output layer
    f32 = write_gguf(hf, tmp_path / "plain.F32.gguf")
    gguf = write_rank_gguf(hf, f32, tmp_path / "rerank.F32.gguf", yes, no)
    documents = DOCUMENTS[:2]
    with engine(gguf) as running:
        assert running.reranks.pooling.reason == "qwen3.pooling_type"
        assert running.reranks.prompt.source == "tokenizer.chat_template.rerank"
        assert running.reranks.prompt.takes_instruction  # the default one, spelled out
        scores = running.rerank(QUERY, documents)
        ids = prompt_ids(running, documents)
        texts = [running.detokenize(t) for t in ids]
    assert texts == [reference_prompt(QUERY, d) for d in documents]
    for tokens, score in zip(ids, scores, strict=True):
        assert abs(score - reference_score(hf, tokens, yes, no)) < TOL


def test_what_a_model_cannot_rerank_is_refused_with_nothing_queued(yes_no: InferenceEngine):
    long_document = "word " * yes_no.max_model_len
    refusals: list[tuple[list[str], RerankSettings, str, type[RequestError]]] = [
        ([], RerankSettings(QUERY), "documents", RequestError),
        (["a"], RerankSettings(""), "query", RequestError),
        (["a", long_document], RerankSettings(QUERY), "documents", ContextLengthExceeded),
        (["a"], RerankSettings(long_document), "query", ContextLengthExceeded),
        (["a"], RerankSettings(QUERY, max_tokens_per_doc=0), "max_tokens_per_doc", RequestError),
    ]
    for documents, settings, param, error in refusals:
        with pytest.raises(error) as refused:
            yes_no.submit_rerank(documents, settings, print, "refused")
        assert refused.value.param == param
    with pytest.raises(RequestError) as refused:
        yes_no.embed(["a"])
    assert (refused.value.param, str(refused.value)) == (
        "model",
        "model 'qwen3-rerank' is a reranker: it answers /v1/rerank",
    )
    assert yes_no.is_idle()


def test_a_chat_model_reranks_only_when_served_with_pooling_rank(tiny_model_dir: Path):
    with engine(tiny_model_dir) as chat, pytest.raises(RequestError) as refused:
        chat.rerank(QUERY, ["a"])
    assert refused.value.param == "model"
    assert str(refused.value).startswith("model 'tiny-llama' is not a reranker (")
    with engine(tiny_model_dir, pooling="rank") as ranked:
        assert ranked.reranks.head is not None
        assert ranked.reranks.head.source == "model.embed_tokens.weight rows of no, yes"  # tied
        [score] = ranked.rerank(QUERY, ["a"])
    assert 0 < score < 1
