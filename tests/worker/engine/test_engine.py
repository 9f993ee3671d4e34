"""InferenceEngine on the real default model: parity with transformers, the seed API, errors."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from bench.accuracy import sequence_logits as full_sequence_logits
from common.sampling_params import SamplingParams
from tests.worker.gguf_oracle import transformers_from_gguf
from tests.worker.model_factory import transformers_generate_batch
from worker.engine.inference_engine import InferenceEngine
from worker.engine.sequence import TokenEvent
from worker.kv.kv_rows import KV_DTYPES, Q8_0
from worker.machine.cpu_info import has_int8_dot_product
from worker.model.loader import load_model
from worker.model.model_dir import gguf_source

pytestmark = pytest.mark.slow

CHAT_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain photosynthesis in one sentence.",
    "List three prime numbers.",
    "How do I boil an egg?",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 12?",
    "Give me a tip for learning to code.",
]

TEACHER_TEXT = (
    "The history of astronomy is the story of people looking up. Early farmers tracked the "
    "seasons by the rising of certain stars, and sailors steered by the pole star long before "
    "anyone understood why it stayed still. Telescopes changed everything: Galileo saw moons "
    "circling Jupiter, and the heavens were no longer perfect and unchanging. Today, space "
    "telescopes measure the light of galaxies that formed billions of years ago. Astronomers "
    "split that light into spectra and read in it what the stars are made of, how fast they "
    "move and how far away they are. Radio dishes listen to cold gas between the stars, and "
    "detectors buried deep underground wait for neutrinos from the core of the sun. Each new "
    "instrument has opened a new window, and almost every window has shown something nobody "
    "expected: pulsars, quasars, the faint glow left over from the early universe, and planets "
    "around other stars by the thousand. The next generation of telescopes will look for the "
    "chemical signs of life in the air of those distant worlds."
)


# Precision exact: these tests hold the engine's paths to transformers' float32 answers and to
# each other, which 8-bit activations (the default, precision file) would blur: there a change
# of 1e-7 can move an activation across a rounding step.
@pytest.fixture(scope="module")
def engine() -> Iterator[InferenceEngine]:
    with InferenceEngine(dtype="float32", precision="exact", kv_cache_mb=256) as eng:
        yield eng


@pytest.fixture(scope="module")
def teacher_ids(engine: InferenceEngine) -> list[int]:
    return engine.tokenizer.encode(TEACHER_TEXT)


@pytest.fixture(scope="module")
def float32_logits(engine: InferenceEngine, teacher_ids: list[int]) -> torch.Tensor:
    """The float32 model's logits over the teacher text: what each lower precision is held to
    (computed once for the module: a load and a forward pass each time otherwise)."""
    model = load_model(engine.model_dir, torch.float32, torch.device("cpu"))
    return full_sequence_logits(model, teacher_ids)


def greedy_token_ids(
    engine: InferenceEngine, prompts: list[str] | list[list[dict[str, str]]], max_tokens: int
) -> list[list[int]]:
    """Submit every prompt at once (one continuous batch) and collect each one's tokens."""
    done = threading.Semaphore(0)
    tokens: dict[str, list[int]] = {}

    def sink(event: TokenEvent) -> None:
        tokens.setdefault(event.request_id, []).extend(event.token_ids)
        if event.finish_reason is not None:
            done.release()

    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    ids = [
        engine.submit(p, params, sink, request_id=f"parity-{i}")[0] for i, p in enumerate(prompts)
    ]
    for _ in prompts:
        assert done.acquire(timeout=300)
    return [tokens[i] for i in ids]


def transformers_greedy(
    engine: InferenceEngine, prompts: list[str], max_tokens: int
) -> list[list[int]]:
    """transformers' greedy tokens for each prompt, the file dequantized by its own loader."""
    source = gguf_source(engine.model_dir)
    assert source is not None
    reference = transformers_from_gguf(source)
    ids = [engine.requests.prompt_token_ids(prompt) for prompt in prompts]
    return transformers_generate_batch(reference, ids, max_tokens, pad_token_id=2)


def test_greedy_output_equals_transformers_generate(engine: InferenceEngine):
    ours = greedy_token_ids(engine, CHAT_PROMPTS, max_tokens=64)
    expected = transformers_greedy(engine, CHAT_PROMPTS, 64)
    for prompt, our_ids, their_ids in zip(CHAT_PROMPTS, ours, expected, strict=True):
        assert our_ids == their_ids, prompt


def test_drafted_tokens_keep_greedy_output_equal_to_transformers(engine: InferenceEngine):
    """One stream repeating its input: the n-gram drafts are fed and mostly kept, and the
    tokens are still exactly the reference model's."""
    prompt = "Copy this list exactly: apples, pears, plums, apples, pears, plums, apples, pears."
    before = engine.get_stats()
    [ours] = greedy_token_ids(engine, [prompt], max_tokens=60)
    after = engine.get_stats()
    kept = after["accepted_draft_tokens"] - before["accepted_draft_tokens"]
    assert kept > 10 and after["decode_steps"] - before["decode_steps"] < len(ours) - 10
    assert [ours] == transformers_greedy(engine, [prompt], 60)


def test_answers_a_real_question_through_the_seed_api(engine: InferenceEngine):
    answer = engine.generate("What is the capital of France?", temperature=0, max_tokens=20)
    assert "Paris" in answer


def test_bfloat16_agrees_with_float32_under_teacher_forcing(
    engine: InferenceEngine, teacher_ids: list[int], float32_logits: torch.Tensor
):
    model = load_model(engine.model_dir, torch.bfloat16, torch.device("cpu"))
    agree = float32_logits.argmax(-1) == full_sequence_logits(model, teacher_ids).argmax(-1)
    assert len(teacher_ids) > 190
    assert agree.float().mean().item() >= 0.97


def test_int8_option_keeps_most_top_choices(
    engine: InferenceEngine, teacher_ids: list[int], float32_logits: torch.Tensor
):
    """W8A8 is an opt-in speed mode; this pins its measured accuracy (docs/BENCHMARKS.md)."""
    int8 = load_model(engine.model_dir, torch.float32, torch.device("cpu"), quantization="int8")
    agree = float32_logits.argmax(-1) == full_sequence_logits(int8, teacher_ids).argmax(-1)
    assert agree.float().mean().item() >= 0.85


def test_int4_option_matches_float32_like_bfloat16_does(
    engine: InferenceEngine, teacher_ids: list[int], float32_logits: torch.Tensor
):
    """The default model is a Q4_1 GGUF: int4 re-packs its own codes; the kernel path
    (float32_copy off, so the whole sequence goes through it) keeps bf16's agreement."""
    int4 = load_model(
        engine.model_dir,
        torch.bfloat16,
        torch.device("cpu"),
        quantization="int4",
        float32_copy=False,
    )
    agree = float32_logits.argmax(-1) == full_sequence_logits(int4, teacher_ids).argmax(-1)
    assert agree.float().mean().item() >= 0.97


def test_int4_engine_serves_greedy_requests_reproducibly():
    """One stream decodes through the int4 kernel, its 16+-row prefill through float32.

    Without the prefix cache, so the second request computes exactly what the first did: from
    the cache, its last prompt token would go through the bf16 one-row kernel instead of the
    float32 prefill, and a near-tie may then break the other way (README, on seeds).
    """
    with InferenceEngine(quantization="int4", kv_cache_mb=64, enable_prefix_caching=False) as int4:
        text = int4.generate("Name three colours.", temperature=0, max_tokens=24)
        assert isinstance(text, str) and len(text.split()) >= 3
        assert int4.generate("Name three colours.", temperature=0, max_tokens=24) == text


def test_int8_engine_serves_where_the_cpu_has_an_int8_dot_product_and_is_refused_elsewhere():
    """Without VNNI or AMX torch's int8 matmul is a slow loop (~2 GMAC/s on an AVX2 EPYC, 10x
    below the default engine): the option is refused up front there, and serves elsewhere."""
    if not has_int8_dot_product():
        with pytest.raises(ValueError, match="int8 dot-product instruction"):
            InferenceEngine(quantization="int8", kv_cache_mb=64)
        return
    with InferenceEngine(quantization="int8", dtype="float32", kv_cache_mb=64) as int8:
        text = int8.generate("Name three colours.", temperature=0, max_tokens=12)
        assert isinstance(text, str) and len(text.split()) >= 2


@pytest.mark.parametrize("kv_dtype", [torch.float16, Q8_0], ids=["float16", "q8_0"])
def test_a_smaller_kv_cache_keeps_the_top_choices_under_teacher_forcing(
    engine: InferenceEngine, kv_dtype: torch.dtype
):
    """Every position attends over k/v rounded to float16, or to q8_0 blocks, as such a cache
    stores them; the default weights keep float32's argmax (1,024 positions of
    bench/accuracy.py: 100% with float16, 98.9% with q8_0)."""
    ids = engine.tokenizer.encode(TEACHER_TEXT)
    model = engine.model
    reference = full_sequence_logits(model, ids).argmax(-1)
    rounded = full_sequence_logits(model, ids, kv_dtype).argmax(-1)
    assert len(ids) > 190
    assert (reference == rounded).float().mean().item() >= 0.98


@pytest.mark.parametrize(("kv_dtype", "precision"), [("float16", "file"), ("q8_0", "exact")])
def test_a_smaller_kv_cache_decodes_through_the_native_kernel_like_its_prefill(
    kv_dtype: str, precision: str
):
    """Greedy tokens of a float16- or q8_0-cache engine, decoded one step at a time through
    the native kernel, equal those of the same cache read by the reference attention. (The
    two paths' RoPE may round a k value's last bit apart, which can move a q8_0 code by one;
    under 8-bit activations such a nudge breaks near-ties, so q8_0 is compared under exact.)"""
    prompt = "Name three colours."
    with InferenceEngine(
        kv_cache_dtype=kv_dtype, kv_cache_mb=64, speculative_tokens=0, precision=precision
    ) as small:
        assert small.cache.storage.k.dtype == KV_DTYPES[kv_dtype]
        native = small.generate(prompt, temperature=0, max_tokens=16)
        small.model.native_decode = False  # the reference path: torch ops over the same cache
        reference = small.generate(prompt, temperature=0, max_tokens=16)
    assert native == reference and len(native.split()) >= 3


def test_int4_is_refused_off_the_cpu():
    with pytest.raises(ValueError, match="CPU only"):
        InferenceEngine(quantization="int4", device="cuda")


def test_prompts_sharing_a_system_prompt_mid_page_answer_as_without_the_cache(
    engine: InferenceEngine,
):
    """The second prompt copies the rows it shares with the first past their last common
    full page (the system prompt ends mid-page); its answer is the one computed afresh."""
    system = {"role": "system", "content": TEACHER_TEXT[:300]}
    prompts = [[system, {"role": "user", "content": q}] for q in ("Sum it up.", "Why stars?")]
    page = engine.options.page_size
    ids = [engine.requests.prompt_token_ids(p) for p in prompts]
    common = next(i for i, (a, b) in enumerate(zip(*ids, strict=False)) if a != b)
    assert common % page, "the shared prefix must end mid-page for this test"
    hits_before = engine.get_stats()["prefix_cache_hit_tokens"]
    cached = [engine.generate(p, temperature=0, max_tokens=16) for p in prompts]
    assert engine.get_stats()["prefix_cache_hit_tokens"] - hits_before >= common
    with InferenceEngine(
        dtype="float32", precision="exact", kv_cache_mb=64, enable_prefix_caching=False
    ) as fresh:
        assert [fresh.generate(p, temperature=0, max_tokens=16) for p in prompts] == cached


def test_prompts_sharing_a_system_prompt_prefilled_together_answer_as_each_afresh(
    engine: InferenceEngine,
):
    """Arriving together, the first computes the system prompt and the others' tails attend
    over its rows together (worker.model.shared_prefix), the rows past its last full page
    taken from the first's too; each answer is the one computed afresh, without the cache."""
    system = {"role": "system", "content": TEACHER_TEXT[:400]}
    questions = ("Sum it up.", "Why stars?", "Name one telescope.", "What is a pulsar?")
    prompts = [[system, {"role": "user", "content": q}] for q in questions]
    ids = [engine.requests.prompt_token_ids(p) for p in prompts]
    common = min(
        next(i for i, (a, b) in enumerate(zip(ids[0], other, strict=False)) if a != b)
        for other in ids[1:]
    )
    assert common % engine.options.page_size, "the shared prefix must end mid-page here"
    hits_before = engine.get_stats()["prefix_cache_hit_tokens"]
    runner = engine.scheduler.runner
    build = runner.build_batch
    groups: list[int] = []

    def spy(chunks):
        input_ids, batch = build(chunks)
        groups.extend(len(p.seqs) for p in batch.shared_prefixes)
        return input_ids, batch

    runner.build_batch = spy  # type: ignore[method-assign]
    try:
        together = greedy_token_ids(engine, prompts, max_tokens=12)
    finally:
        del runner.build_batch
    assert groups and max(groups) >= 2, "the tails should have shared the prompt's rows"
    # Each other prompt's whole shared prefix, its last rows too (the first's own hits, from
    # earlier tests' prompts, come on top).
    assert engine.get_stats()["prefix_cache_hit_tokens"] - hits_before >= 3 * common
    with InferenceEngine(
        dtype="float32", precision="exact", kv_cache_mb=64, enable_prefix_caching=False
    ) as fresh:
        assert greedy_token_ids(fresh, prompts, max_tokens=12) == together


def test_flex_attention_over_the_pages_in_place_answers_as_the_gathering_path(
    engine: InferenceEngine,
):
    """attention="flex" (the CUDA default) on the CPU, through torch's reference kernel: the
    same greedy answers for prompts that share a system prompt mid-page and arrive together
    (pages shared, rows read where another sequence writes them) and for plain chats."""
    system = {"role": "system", "content": TEACHER_TEXT[:400]}
    questions = ("Sum it up.", "Why stars?", "Name one telescope.")
    shared = [[system, {"role": "user", "content": q}] for q in questions]
    chats = CHAT_PROMPTS[:3]
    # 16 MB: 352 cache rows, every query computed against each of them by the CPU's reference
    # flex kernel; the shared system prompt's pages leave room for all three at once. No
    # drafts: their decode-cost probe would time the reference kernel at eight batch sizes.
    options = {"dtype": "float32", "precision": "exact", "kv_cache_mb": 16, "speculative_tokens": 0}
    with InferenceEngine(**options, attention="flex") as flex:
        runner = flex.scheduler.runner
        build = runner.build_batch
        planned: list[bool] = []

        def spy(chunks):
            input_ids, batch = build(chunks)
            planned.append(batch.in_place is not None)
            return input_ids, batch

        runner.build_batch = spy  # type: ignore[method-assign]
        # A few decode steps each: the reference kernel is ~0.5 s a step on 2 cores.
        got = greedy_token_ids(flex, shared, 6), greedy_token_ids(flex, chats, 8)
    assert planned and all(planned)
    assert got == (greedy_token_ids(engine, shared, 6), greedy_token_ids(engine, chats, 8))


def test_generate_shapes(engine: InferenceEngine):
    assert isinstance(engine.generate("Hi", temperature=0, max_tokens=4), str)
    both = engine.generate(["Hi", "Hello"], temperature=0, max_tokens=4)
    assert isinstance(both, list) and len(both) == 2
    assert both[0] == engine.generate("Hi", temperature=0, max_tokens=4)
    pieces = list(engine.generate("Hi", stream=True, temperature=0, max_tokens=6))
    assert "".join(pieces) == engine.generate("Hi", temperature=0, max_tokens=6)
    tagged = list(engine.generate(["Hi", "Hello"], stream=True, temperature=0, max_tokens=4))
    assert {i for i, _ in tagged} == {0, 1}
    assert "".join(t for i, t in tagged if i == 1) == both[1]


def test_messages_and_raw_prompts(engine: InferenceEngine):
    messages = [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": [{"type": "text", "text": "Capital of France?"}]},
    ]
    assert engine.generate(messages, temperature=0, max_tokens=8)
    raw = engine.generate("The capital of France is", chat=False, temperature=0, max_tokens=5)
    assert "Paris" in raw


def test_n_choices_and_generate_with_request(engine: InferenceEngine):
    from worker.engine.request import GenerationRequest

    texts = engine.generate("Tell me a word.", n=3, temperature=1.0, seed=5, max_tokens=5)
    assert isinstance(texts, list) and len(texts) == 3
    request = GenerationRequest(
        messages=[{"role": "user", "content": "Hi"}], temperature=0, max_tokens=4
    )
    assert engine.generate_with_request(request) == engine.generate(
        "Hi", temperature=0, max_tokens=4
    )


def test_seeded_requests_repeat(engine: InferenceEngine):
    # The first run computes the prompt; the next ones read it from the prefix cache, so
    # their logits are bit-identical and only the seed decides the draws (README: Sampling).
    engine.generate("Invent a name.", temperature=1.0, top_k=0, seed=42, max_tokens=12)
    again = engine.generate("Invent a name.", temperature=1.0, top_k=0, seed=42, max_tokens=12)
    third = engine.generate("Invent a name.", temperature=1.0, top_k=0, seed=42, max_tokens=12)
    assert again == third
    other = engine.generate("Invent a name.", temperature=1.0, top_k=0, seed=43, max_tokens=12)
    assert other != again


async def test_generate_async_streams_the_same_text(engine: InferenceEngine):
    pieces = [p async for p in engine.generate_async("Hi", temperature=0, max_tokens=6)]
    assert "".join(pieces) == engine.generate("Hi", temperature=0, max_tokens=6)


def test_closing_a_stream_early_frees_its_pages(engine: InferenceEngine):
    stream = engine.generate("Write a long story.", stream=True, temperature=0, max_tokens=200)
    next(stream)
    stream.close()
    for _ in range(500):
        if engine.get_stats()["kv_pages_in_use"] == 0:
            break
        threading.Event().wait(0.01)
    assert engine.get_stats()["kv_pages_in_use"] == 0


@pytest.mark.parametrize(
    ("prompt", "kwargs", "message"),
    [
        ("", {}, "prompt must not be empty"),
        ("Hi", {"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
        ("Hi", {"max_tokens": 9000}, "max_tokens 9000"),
        ("Hi", {"temperature": -0.5}, "temperature must be >= 0, got -0.5"),
        ("Hi", {"top_p": 0.0}, r"top_p must be in \(0, 1\], got 0.0"),
        ("Hi", {"top_p": 1.5}, r"top_p must be in \(0, 1\], got 1.5"),
        ("Hi", {"top_k": -2}, "top_k must be >= -1"),
        ("Hi", {"seed": 2**64}, "seed must be in"),
        ("\ud800", {}, "prompt must be valid Unicode text"),
        ("Hi", {"beam_width": 4}, "unknown sampling parameter 'beam_width'"),
        ([{"role": "wizard", "content": "x"}], {}, "messages.0.role"),
        ([], {}, "messages must not be empty"),
    ],
)
def test_bad_input_raises_and_leaves_the_engine_untouched(
    engine: InferenceEngine, prompt, kwargs, message
):
    before = engine.get_stats()
    with pytest.raises(ValueError, match=message):
        engine.generate(prompt, **kwargs)
    after = engine.get_stats()
    assert after["total_tasks"] == before["total_tasks"]
    assert after["waiting_queue"] == 0


def test_stats_report_every_documented_field(engine: InferenceEngine):
    engine.generate("Hi", temperature=0, max_tokens=3)
    stats = engine.get_stats()
    for key in (
        "total_tasks",
        "total_tokens",
        "active_tasks",
        "waiting_queue",
        "kv_pages_total",
        "kv_pages_in_use",
        "kv_pages_cached",
        "prefix_cache_hit_tokens",
        "prefill_tokens",
        "decode_steps",
        "preemptions",
    ):
        assert isinstance(stats[key], int), key
    assert stats["kv_pages_in_use"] == 0 and stats["active_tasks"] == 0
    assert stats["kv_pages_cached"] > 0  # finished prompts stay indexed
    assert "total_tasks" in stats and dict(stats) == engine.stats().as_dict()
    with pytest.raises(TypeError):  # a read-only view: the engine's figures, not a copy to edit
        stats["total_tasks"] = 0  # type: ignore[index]


def test_contiguous_cache_gives_the_same_greedy_text(engine: InferenceEngine):
    with InferenceEngine(
        dtype="float32", precision="exact", kv_cache="contiguous", max_model_len=512, max_seqs=4
    ) as other:
        assert other.generate(CHAT_PROMPTS[:2], temperature=0, max_tokens=16) == engine.generate(
            CHAT_PROMPTS[:2], temperature=0, max_tokens=16
        )


def test_shutdown_joins_the_scheduler_thread(default_model_dir: Path):
    eng = InferenceEngine(dtype="float32", precision="exact", kv_cache_mb=64)
    thread = eng.scheduler._thread
    assert thread is not None and thread.is_alive()
    eng.shutdown()
    assert not thread.is_alive()
