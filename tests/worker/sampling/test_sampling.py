"""Tests for worker/sampling/: exact filter sets, penalties, logprobs, batch-independent draws."""

from __future__ import annotations

import math

import pytest
import torch

from common.sampling_params import SamplingParams
from worker.sampling.penalties import apply_penalties
from worker.sampling.pipeline import (
    BaseSamplingStrategy,
    MinPStrategy,
    SamplingPipeline,
    TemperatureStrategy,
    TopKStrategy,
    TopPStrategy,
    inverse_cdf,
)
from worker.sampling.rows import TOP_P_CANDIDATES, SamplingRow, SamplingRows
from worker.sampling.sampler import sample, sample_batch, sample_rows

# Probabilities whose cumulative sums stay far from the p values used below.
PROBS = [0.05, 0.5, 0.1, 0.2, 0.15]


def make_row(
    *, seed: int | None = None, prompt: tuple[int, ...] = (), output: tuple[int, ...] = (), **kw
) -> SamplingRow:
    """A row with top_k off unless given (as SamplingParams defaults it)."""
    kw.setdefault("top_k", 0)
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    return SamplingRow(SamplingParams(**kw), generator, prompt, output)


def build(*rows: SamplingRow) -> SamplingRows:
    return SamplingRows.build(rows, "cpu")


def log_probs_rows(num_rows: int, probs: list[float] = PROBS) -> torch.Tensor:
    return torch.tensor([[math.log(p) for p in probs]] * num_rows)


def kept(logits: torch.Tensor) -> list[list[int]]:
    """Per row, the token ids that were not filtered out."""
    return [torch.isfinite(row).nonzero().flatten().tolist() for row in logits]


def random_logits(seed: int, num_rows: int, vocab: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(num_rows, vocab, generator=torch.Generator().manual_seed(seed)) * scale


def test_greedy_rows_pick_the_first_maximum() -> None:
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 3.0, 1.0], [-5.0, -4.0, -4.5]])
    rows = build(*(make_row(temperature=0.0, top_k=1 + i, top_p=0.5) for i in range(3)))

    out = sample_batch(logits, rows)

    assert out.token_ids == [1, 0, 1]
    assert out.logprobs == [None, None, None]
    assert out.top_logprobs == [None, None, None]


def test_greedy_matches_argmax_on_random_logits() -> None:
    logits = random_logits(0, 6, 500)
    rows = build(*(make_row(temperature=0.0) for _ in range(6)))

    assert sample_batch(logits, rows).token_ids == logits.argmax(-1).tolist()


@pytest.mark.parametrize("temperature", [0.05, 0.7, 1.0, 3.0, 50.0])
def test_top_k_one_equals_greedy_for_any_temperature(temperature: float) -> None:
    logits = random_logits(1, 8, 300)
    rows = build(*(make_row(seed=s, temperature=temperature, top_k=1) for s in range(8)))

    assert sample_batch(logits, rows).token_ids == logits.argmax(-1).tolist()


def test_a_tiny_temperature_samples_the_argmax_without_overflowing() -> None:
    logits = random_logits(10, 4, 300)
    rows = build(*(make_row(seed=s, temperature=1e-40) for s in range(4)))

    assert sample_batch(logits, rows).token_ids == logits.argmax(-1).tolist()


def test_top_k_keeps_exactly_the_k_largest() -> None:
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]] * 4)
    rows = build(make_row(top_k=2), make_row(top_k=0), make_row(top_k=4), make_row(top_k=9))

    out = TopKStrategy().apply(logits.clone(), rows)

    assert kept(out) == [[1, 3], [0, 1, 2, 3, 4], [1, 2, 3, 4], [0, 1, 2, 3, 4]]
    assert out[0, 1].item() == 5.0 and out[0, 3].item() == 4.0
    assert torch.equal(out[1], logits[1])


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    logits = log_probs_rows(6)
    top_ps = [0.45, 0.6, 0.8, 0.93, 0.97, 1.0]
    rows = build(*(make_row(top_p=p) for p in top_ps))

    out = TopPStrategy().apply(logits.clone(), rows)

    assert kept(out) == [[1], [1, 3], [1, 3, 4], [1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    assert torch.equal(out[5], logits[5])


def test_top_p_sees_the_distribution_left_by_top_k() -> None:
    # After top-k 2 the probabilities are 0.625 / 0.375, so p = 0.6 keeps one token; measured
    # against the unfiltered 0.5 / 0.3 it would keep two.
    logits = log_probs_rows(2, [0.5, 0.3, 0.2])
    rows = build(make_row(top_k=2, top_p=0.6), make_row(top_k=0, top_p=0.6))

    out = SamplingPipeline.default().apply(logits, rows)

    assert kept(out) == [[0], [0, 1]]


def reference_top_p(row: torch.Tensor, top_p: float) -> list[int]:
    """Top-p by a plain walk down the float64-sorted distribution."""
    probs = torch.softmax(row.double(), dim=-1)
    chosen, mass = [], 0.0
    for token in torch.argsort(probs, descending=True).tolist():
        if mass >= top_p:
            break
        chosen.append(token)
        mass += probs[token].item()
    return sorted(chosen)


def test_top_p_nucleus_wider_than_the_candidates_matches_a_full_sort() -> None:
    flat = random_logits(2, 2, 2000, scale=0.3)
    peaked = random_logits(3, 2, 2000, scale=4.0)
    logits = torch.cat([flat, peaked])
    top_ps = [0.9, 0.5, 0.9, 0.5]
    rows = build(*(make_row(top_p=p) for p in top_ps))

    got = kept(TopPStrategy().apply(logits.clone(), rows))

    expected = [reference_top_p(row, p) for row, p in zip(logits, top_ps, strict=True)]
    assert got == expected
    assert len(expected[0]) > TOP_P_CANDIDATES  # the full-sort path ran
    assert len(expected[2]) < TOP_P_CANDIDATES  # the candidate path ran


def test_min_p_keeps_tokens_at_least_min_p_times_the_best() -> None:
    logits = log_probs_rows(4, [0.5, 0.2, 0.15, 0.1, 0.05])
    rows = build(*(make_row(min_p=m) for m in [0.35, 0.25, 0.0, 1.0]))

    out = MinPStrategy().apply(logits.clone(), rows)

    assert kept(out) == [[0, 1], [0, 1, 2], [0, 1, 2, 3, 4], [0]]


def test_temperature_divides_sampled_rows_and_leaves_greedy_rows() -> None:
    logits = torch.tensor([[1.0, 2.0, 4.0]] * 3)
    rows = build(make_row(temperature=0.5), make_row(temperature=0.0), make_row(temperature=2.0))

    out = TemperatureStrategy().apply(logits.clone(), rows)

    assert out.tolist() == [[2.0, 4.0, 8.0], [1.0, 2.0, 4.0], [0.5, 1.0, 2.0]]


def test_filters_leave_greedy_rows_untouched() -> None:
    logits = log_probs_rows(1)
    rows = build(make_row(temperature=0.0, top_k=1, top_p=0.1, min_p=0.9))

    assert torch.equal(SamplingPipeline.default().apply(logits, rows), logits)


def test_rows_with_different_settings_behave_as_alone() -> None:
    logits = torch.cat([random_logits(4, 1, 5), log_probs_rows(2)])
    for seed in range(30):
        settings = [
            {"temperature": 0.0},
            {"seed": seed, "top_k": 2},
            {"seed": seed + 100, "top_p": 0.6},
        ]
        together = sample_batch(logits, build(*(make_row(**s) for s in settings))).token_ids
        alone = [
            sample_batch(logits[i : i + 1], build(make_row(**s))).token_ids[0]
            for i, s in enumerate(settings)
        ]

        assert together == alone
        assert together[0] == logits[0].argmax().item()
        assert together[1] in (1, 3)
        assert together[2] in (1, 3)


def test_same_seed_gives_the_same_tokens_and_another_seed_does_not() -> None:
    logits = random_logits(5, 1, 1000, scale=0.1)

    def run(seed: int) -> list[int]:
        row = make_row(seed=seed, temperature=0.9, top_p=0.95)
        rows = build(row)
        return [sample_batch(logits, rows).token_ids[0] for _ in range(20)]

    assert run(7) == run(7)
    assert run(7) != run(8)


# Settings of the row under test in the batch-invariance test: every filter and both top-p paths.
TARGETS = [
    {"temperature": 0.8, "top_p": 0.95},
    {"temperature": 1.0, "top_k": 50, "top_p": 0.9},
    {"temperature": 1.3},
    {"temperature": 0.7, "min_p": 0.05, "top_k": 400},
    {"temperature": 1.0, "top_p": 0.9, "presence_penalty": 0.5, "repetition_penalty": 1.2},
]


def neighbour(rng: torch.Generator, index: int) -> SamplingRow:
    """A random row to surround the one under test."""
    pick = torch.randint(0, 1000, (6,), generator=rng).tolist()
    return make_row(
        seed=pick[0],
        temperature=[0.0, 0.5, 1.0, 1.5][pick[1] % 4],
        top_k=[0, 5, 64, 700][pick[2] % 4],
        top_p=[1.0, 0.5, 0.9, 0.99][pick[3] % 4],
        min_p=[0.0, 0.1][pick[4] % 2],
        frequency_penalty=[0.0, 0.3][pick[5] % 2],
        output=(index, index + 1, index + 1),
        logprobs=bool(pick[5] % 3 == 0),
    )


@pytest.mark.slow  # 10 seeds, each at every position of a batch: seconds
def test_a_seeded_row_draws_the_same_token_alone_and_anywhere_in_a_batch() -> None:
    vocab, batch = 3000, 5
    rng = torch.Generator().manual_seed(11)
    for seed in range(10):
        settings = TARGETS[seed % len(TARGETS)]
        target = random_logits(100 + seed, 1, vocab, scale=[0.3, 3.0][seed % 2])

        def target_row(seed: int = seed, settings: dict = settings) -> SamplingRow:
            return make_row(seed=seed, prompt=(1, 2), output=(3, 3), **settings)

        alone = sample_batch(target, build(target_row())).token_ids[0]
        for position in range(batch):
            others = random_logits(1000 * seed + position, batch, vocab, scale=2.0)
            logits = torch.cat([others[:position], target, others[position + 1 :]])
            rows = [neighbour(rng, i) for i in range(batch)]
            rows[position] = target_row()

            assert sample_batch(logits, build(*rows)).token_ids[position] == alone


def test_empirical_frequencies_match_softmax() -> None:
    logits = torch.tensor([1.0, 0.0, 2.0, -1.0, 0.5])
    num_draws = 20_000
    generator = torch.Generator().manual_seed(3)

    ids = sample(logits.expand(num_draws, 5), generator=generator)

    freq = torch.bincount(ids, minlength=5).double() / num_draws
    expected = torch.softmax(logits.double(), dim=-1)
    assert torch.allclose(freq, expected, atol=0.01)


def test_empirical_frequencies_follow_temperature_and_top_k() -> None:
    logits = torch.tensor([1.0, 0.0, 2.0, -1.0, 0.5])
    num_draws = 20_000
    generator = torch.Generator().manual_seed(4)

    ids = sample(logits.expand(num_draws, 5), temperature=0.5, top_k=3, generator=generator)

    counts = torch.bincount(ids, minlength=5)
    assert counts[1].item() == 0 and counts[3].item() == 0
    top3 = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64) / 0.5
    expected = torch.softmax(top3, dim=-1)
    freq = counts[[0, 2, 4]].double() / num_draws
    assert torch.allclose(freq, expected, atol=0.01)


def test_presence_and_frequency_penalties_subtract_exactly() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0, 0.5]] * 3)
    rows = build(
        make_row(prompt=(2,), output=(1, 1, 3), presence_penalty=0.5, frequency_penalty=0.25),
        make_row(output=(0, 1)),
        make_row(output=(4,), presence_penalty=-1.0),
    )

    out = apply_penalties(logits, rows.penalties)

    assert out.tolist() == [
        [1.0, 1.0, 3.0, 3.25, 0.5],
        [1.0, 2.0, 3.0, 4.0, 0.5],
        [1.0, 2.0, 3.0, 4.0, 1.5],
    ]
    assert logits[0].tolist() == [1.0, 2.0, 3.0, 4.0, 0.5]


def test_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0], [4.0, 1.0, 1.0, 1.0, 1.0]])
    rows = build(
        make_row(prompt=(0, 1), output=(3,), repetition_penalty=2.0),
        # repetition first, then frequency: 4 / 2 - 1 = 1, not (4 - 1) / 2
        make_row(output=(0,), repetition_penalty=2.0, frequency_penalty=1.0),
    )

    out = apply_penalties(logits, rows.penalties)

    assert out.tolist() == [[1.0, -2.0, 0.5, 1.5, -2.0], [1.0, 1.0, 1.0, 1.0, 1.0]]


def test_penalties_change_the_greedy_pick() -> None:
    logits = torch.tensor([[3.0, 2.75], [3.0, 2.75]])
    rows = build(
        make_row(temperature=0.0, output=(0,), presence_penalty=0.5),
        make_row(temperature=0.0, output=(0,)),
    )

    assert sample_batch(logits, rows).token_ids == [1, 0]


def test_logprobs_are_log_softmax_of_penalized_logits_before_temperature() -> None:
    logits = torch.tensor([[1.0, 2.0, 0.5, -1.0, 0.0]] * 4)
    penalized = torch.tensor([[1.0, 1.5, 0.5, -1.0, 0.0]])  # token 1 seen once, presence 0.5
    expected = torch.log_softmax(penalized, dim=-1)[0].tolist()
    rows = build(
        make_row(temperature=0.0, output=(1,), presence_penalty=0.5, logprobs=True, top_logprobs=3),
        make_row(
            seed=1, temperature=0.3, top_k=2, output=(1,), presence_penalty=0.5, logprobs=True
        ),
        make_row(seed=2, output=(1,), presence_penalty=0.5),
        make_row(temperature=0.0, top_logprobs=2),
    )

    out = sample_batch(logits, rows)

    assert out.token_ids[0] == 1 and out.token_ids[1] in (0, 1)
    assert out.logprobs[0] == expected[1]
    assert out.logprobs[1] == expected[out.token_ids[1]]
    assert out.logprobs[2:] == [None, None]
    top = out.top_logprobs[0]
    assert top is not None and [token for token, _ in top] == [1, 0, 2]
    assert [lp for _, lp in top] == [expected[1], expected[0], expected[2]]
    assert out.top_logprobs[1:] == [None, None, None]


def test_greedy_rows_never_advance_their_generator() -> None:
    logits = random_logits(6, 2, 100)
    greedy, sampled = make_row(seed=5, temperature=0.0), make_row(seed=6)
    greedy_state = greedy.generator.get_state().clone()
    sampled_state = sampled.generator.get_state().clone()

    sample_batch(logits, build(greedy, sampled))

    assert torch.equal(greedy.generator.get_state(), greedy_state)
    assert not torch.equal(sampled.generator.get_state(), sampled_state)


class Exploding(BaseSamplingStrategy):
    def apply(self, logits: torch.Tensor, rows: SamplingRows) -> torch.Tensor:
        raise RuntimeError("the pipeline ran")


def test_an_all_greedy_batch_runs_no_strategy() -> None:
    logits = random_logits(7, 3, 100)
    pipeline = SamplingPipeline([Exploding()])

    greedy = build(*(make_row(temperature=0.0, top_p=0.5) for _ in range(3)))
    assert sample_batch(logits, greedy, pipeline).token_ids == logits.argmax(-1).tolist()
    with pytest.raises(RuntimeError, match="the pipeline ran"):
        sample_batch(logits, build(*(make_row(temperature=t) for t in (0.0, 1.0, 0.0))), pipeline)


def test_build_sets_flags_and_switches_filters_off_on_greedy_rows() -> None:
    rows = build(
        make_row(temperature=0.0, top_k=5, top_p=0.5, min_p=0.2),
        make_row(seed=1, top_k=40, top_p=0.9, logprobs=True, top_logprobs=4),
        make_row(temperature=0.5, top_p=0.75, frequency_penalty=0.5, output=(7, 7)),
    )

    assert rows.top_k.tolist() == [0, 40, 0]
    assert rows.top_p.tolist() == [1.0, pytest.approx(0.9), 0.75]
    assert rows.min_p.tolist() == [0.0, 0.0, 0.0]
    assert rows.sampled_index.tolist() == [1, 2]
    assert rows.top_p_candidates == TOP_P_CANDIDATES  # row 2 has no top-k bound
    assert rows.top_logprobs == (0, 4, 0)
    assert rows.penalties is not None
    assert rows.penalties.output_rows.tolist() == [2, 2]
    assert rows.penalties.output_ids.tolist() == [7, 7]
    assert rows.penalties.output_frequency.tolist() == [0.5, 0.5]
    assert rows.penalties.seen_ids.tolist() == []
    flags = [rows.all_greedy, rows.any_greedy, rows.any_temperature, rows.any_top_k]
    assert flags == [False, True, True, True]
    flags = [rows.any_top_p, rows.any_min_p, rows.any_penalties, rows.any_logprobs]
    assert flags == [True, False, True, True]


def test_sample_batch_never_writes_into_the_callers_logits() -> None:
    logits = random_logits(9, 3, 400)
    before = logits.clone()
    filters_only = build(
        make_row(seed=1, temperature=0.5, top_k=10, top_p=0.9, min_p=0.1),
        make_row(seed=2, top_p=0.8),
        make_row(temperature=0.0, logprobs=True),
    )
    with_penalties = build(
        make_row(temperature=0.0, output=(1, 2), frequency_penalty=1.0),
        make_row(seed=2, top_p=0.8, repetition_penalty=1.5, prompt=(3,)),
        make_row(seed=3),
    )

    sample_batch(logits, filters_only)
    sample_batch(logits, with_penalties)

    assert torch.equal(logits, before)


def test_default_pipeline_runs_temperature_top_k_top_p_min_p() -> None:
    order = [type(s) for s in SamplingPipeline.default().strategies]

    assert order == [TemperatureStrategy, TopKStrategy, TopPStrategy, MinPStrategy]


def test_inverse_cdf_skips_empty_tokens_and_clamps_past_the_end() -> None:
    probs = torch.tensor(
        [[0.3, 0.6, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.0, 0.5, 0.0, 0.5], [0.0, 0.5, 0.0, 0.5]]
    )

    ids = inverse_cdf(probs, torch.tensor([0.95, 0.5, 0.0, 0.5]))

    assert ids.tolist() == [1, 2, 1, 3]


def test_sample_shortcut_shapes() -> None:
    logits = random_logits(8, 3, 40)

    one = sample(logits[1], temperature=0.0)
    many = sample(logits, top_k=1)

    assert one.shape == () and one.item() == logits[1].argmax().item()
    assert many.tolist() == logits.argmax(-1).tolist()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"top_k": -2}, "top_k"),  # -1, like 0, means off
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"min_p": -0.1}, "min_p"),
        ({"min_p": 1.5}, "min_p"),
    ],
)
def test_sample_rejects_invalid_settings(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sample(torch.zeros(2, 4), **kwargs)


@pytest.mark.parametrize(
    "logits", [torch.zeros(2, 2, 4), torch.zeros(2, 0), torch.zeros(2, 4, dtype=torch.long)]
)
def test_sample_rejects_invalid_logits(logits: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="logits"):
        sample(logits)


def test_sample_batch_rejects_a_row_count_mismatch() -> None:
    with pytest.raises(ValueError, match=r"logits must be \(2, V\), got \(3, 4\)"):
        sample_batch(torch.zeros(3, 4), build(make_row(), make_row()))


def test_logit_bias_moves_only_its_rows_tokens() -> None:
    logits = log_probs_rows(3)  # argmax 1 in every row
    rows = build(
        make_row(temperature=0, logit_bias=((4, 100.0),)),
        make_row(temperature=0),
        make_row(temperature=0, logit_bias=((1, -100.0), (2, 0.5))),
    )
    out = sample_batch(logits, rows)
    assert out.token_ids == [4, 1, 3]  # row 2: 1 is banned, 2 gets 0.5 but 3 is still ahead
    assert torch.equal(logits, log_probs_rows(3))  # the caller's logits are not changed


@pytest.mark.parametrize("pair", [(5, 101.0), (-1, 1.0), (5, float("nan"))])
def test_logit_bias_out_of_range_is_refused(pair: tuple[int, float]) -> None:
    with pytest.raises(ValueError, match="logit_bias"):
        SamplingParams(logit_bias=(pair,))


def test_sample_rows_takes_the_argmax_shortcut_only_for_plain_greedy_rows() -> None:
    logits = random_logits(3, 4, 50)
    plain = [make_row(temperature=0), make_row(temperature=0)]
    assert sample_rows(logits[:2], plain).token_ids == logits[:2].argmax(-1).tolist()

    def mixed() -> list[SamplingRow]:  # fresh rows each time: a seeded row's generator moves
        return [
            make_row(temperature=0, logprobs=True),
            make_row(temperature=0, logit_bias=((7, 100.0),)),
            make_row(temperature=0, repetition_penalty=2.0, output=(int(logits[2].argmax()),)),
            make_row(seed=5, temperature=1.0),
        ]

    expected = sample_batch(logits, build(*mixed()))
    out = sample_rows(logits, mixed())
    assert out.token_ids == expected.token_ids and out.logprobs == expected.logprobs
    assert out.token_ids[1] == 7 and out.logprobs[0] is not None
