"""Speculative decoding with n-gram drafts: the guesses, and how many to feed, from measured costs.

A decoding sequence may feed, after its last token, a few drafted tokens (NgramDrafter's
guesses) as extra rows of the same decode forward; the executor then samples row after row
and the scheduler keeps the drafts while the sampled token equals them. Every token is still
sampled from the model's own distribution (for greedy rows the same tokens as without
drafts), so drafts change speed, never output. Whether a draft pays depends on the machine:
a row costs little next to the weights' memory traffic on a GPU, and nearly as much as the
whole step on a compute-bound CPU batch. So the engine measures its decode step at startup,
corrects that table by the steps it then serves, and drafts a token only where its expected
gain beats its cost.
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from worker.model.batch import ForwardBatch

# Drafts are fed only where they promise this much more speed than none. The rate assumes
# each kept token saves its share of a whole step, which holds while every sequence moves
# on; in a batch whose other sequences keep nothing, the step still runs as often and the
# kept token saves only its row. The sampling round per drafted position and the probe's
# optimism (its short context) come on top. Without the margin, busy batches ran slower with
# drafts than without (docs/BENCHMARKS.md).
_REQUIRED_GAIN = 0.1
_FIRST_ACCEPTANCE = 0.5  # a sequence's prior chance that a drafted token is kept
_ACCEPTANCE_WEIGHT = 0.2  # weight of each new observation in the running estimate
_STEP_WEIGHT = 0.1  # weight of each served step in its row count's measured/probed ratio
_PROBE_CONTEXT = 64
# Few rows finely: there the step turns from memory bound to compute bound on a CPU.
_PROBE_ROWS = (1, 2, 3, 4, 6, 8, 12, 16)
# The cache's flat slots the probe writes lie below this.
PROBE_SLOTS = _PROBE_CONTEXT + max(_PROBE_ROWS)

# One decode forward as ModelRunner.forward_batch runs it: (input_ids, batch) → logits.
ForwardFn = Callable[[torch.Tensor, ForwardBatch], torch.Tensor]


class StepCost(Protocol):
    """A decode step's seconds by rows fed, and what the scheduler tells it of served steps."""

    def __call__(self, rows: int) -> float: ...

    def observe(self, rows: int, seconds: float) -> None: ...


def best_draft_rows(cost: StepCost, num_seqs: int, chances: list[float]) -> int:
    """How many of the drafted tokens to feed, most likely kept first: the count that makes
    most tokens per second, expecting from the step num_seqs tokens plus each fed draft's
    chance of being kept (`chances`, in falling order); none unless that beats no drafts by
    _REQUIRED_GAIN."""
    plain_rate = num_seqs / cost(num_seqs)
    best, best_rate, expected = 0, plain_rate, float(num_seqs)
    for extra, chance in enumerate(chances, start=1):
        expected += chance
        rate = expected / cost(num_seqs + extra)
        if rate > best_rate:
            best, best_rate = extra, rate
    return best if best_rate >= (1.0 + _REQUIRED_GAIN) * plain_rate else 0


@dataclass(frozen=True)
class DecodeCost:
    """A decode forward's seconds by its number of rows, measured on this machine at a few
    row counts: linear in between, and past the last one at the last step's slope."""

    rows: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.rows) < 2 or len(self.rows) != len(self.seconds):
            raise ValueError("need the seconds of at least two row counts")
        if list(self.rows) != sorted(set(self.rows)) or self.rows[0] < 1:
            raise ValueError(f"row counts must rise from 1 at least, got {self.rows}")

    def __call__(self, rows: int) -> float:
        i = max(1, min(bisect.bisect_left(self.rows, rows), len(self.rows) - 1))
        r0, r1 = self.rows[i - 1], self.rows[i]
        s0, s1 = self.seconds[i - 1], self.seconds[i]
        return s0 + (s1 - s0) * (rows - r0) / (r1 - r0)

    def observe(self, rows: int, seconds: float) -> None:
        """A fixed table: served steps do not change it (see ServedDecodeCost)."""


class ServedDecodeCost:
    """The startup table, corrected by the decode steps the engine serves.

    Why: the probe times one short sequence's forward on a quiet machine. A served step also
    samples its rows (in rounds, with drafts), attends over longer contexts, and shares the
    cores with the gateway and the clients; the probe read below served steps (docs/BENCHMARKS.md),
    and a probe that a busy moment distorts would steer every later decision.
    Each served step moves its row count's ratio of served to probed seconds; a row count
    not served yet takes the ratios of the nearest served ones (linear in between), so the
    probe's shape holds until served steps say otherwise. Rows beyond the running sequences
    are served only where drafts are fed, so a table too hopeful about extra rows corrects
    itself, and one too wary keeps drafting off, the cheaper mistake.
    """

    def __init__(self, probe: DecodeCost) -> None:
        self.probe = probe
        self.ratios: dict[int, float] = {}
        self._served: list[int] = []  # the keys of `ratios`, in order

    def observe(self, rows: int, seconds: float) -> None:
        ratio = seconds / self.probe(rows)
        before = self.ratios.get(rows)
        if before is None:
            bisect.insort(self._served, rows)
            self.ratios[rows] = ratio
        else:
            self.ratios[rows] = before + _STEP_WEIGHT * (ratio - before)

    def __call__(self, rows: int) -> float:
        return self.probe(rows) * self._ratio(rows)

    def _ratio(self, rows: int) -> float:
        served = self._served
        if not served:
            return 1.0
        i = bisect.bisect_left(served, rows)
        if i < len(served) and served[i] == rows:
            return self.ratios[rows]
        if i == 0 or i == len(served):
            return self.ratios[served[min(i, len(served) - 1)]]
        low, high = served[i - 1], served[i]
        low_ratio, high_ratio = self.ratios[low], self.ratios[high]
        return low_ratio + (high_ratio - low_ratio) * (rows - low) / (high - low)


class NgramDrafter:
    """The tokens that followed the latest earlier occurrence of a sequence's last n tokens.

    Text that quotes its input (edits, extraction, code) or repeats itself continues the
    way it did before; the guess costs dict lookups, and the model verifies it (see the
    module's docstring). The longest matching n in [min_n, max_n] wins: a longer
    match predicts better. The index grows with the sequence, O(new tokens) per call.
    """

    def __init__(self, min_n: int = 2, max_n: int = 4) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n} and {max_n}")
        self.min_n, self.max_n = min_n, max_n
        # For each n: n-gram → the position just after its latest occurrence.
        self._after: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(min_n, max_n + 1)
        }
        self._indexed = 0  # occurrences ending at positions <= this are in the index

    def propose(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to `k` tokens likely to follow `tokens`; [] when its last tokens are new."""
        end = len(tokens)
        # Occurrences ending before `end` only: the suffix itself would predict nothing.
        self._index(tokens, end - 1)
        if k < 1:
            return []
        for n in range(min(self.max_n, end - 1), self.min_n - 1, -1):
            start = self._after[n].get(tuple(tokens[end - n : end]))
            if start is None:
                continue
            draft: list[int] = []
            while len(draft) < k:
                pos = start + len(draft)
                # A loop shorter than k goes round again through the draft itself.
                draft.append(tokens[pos] if pos < end else draft[pos - end])
            return draft
        return []

    def _index(self, tokens: Sequence[int], last: int) -> None:
        for stop in range(self._indexed + 1, last + 1):
            for n, table in self._after.items():
                if stop >= n:
                    table[tuple(tokens[stop - n : stop])] = stop
        self._indexed = max(self._indexed, last)


@dataclass
class DraftState:
    """One sequence's drafter and its running estimate of how often its drafts are kept."""

    drafter: NgramDrafter = field(default_factory=NgramDrafter)
    acceptance: float = _FIRST_ACCEPTANCE
    guess: int | None = None  # this step's first guess when no draft was worth its row

    def observe(self, drafted: int, kept: int) -> None:
        """`kept` of `drafted` tokens survived: kept successes, then one miss if any was not."""
        for hit in [True] * kept + [False] * (kept < drafted):
            self.acceptance += _ACCEPTANCE_WEIGHT * (float(hit) - self.acceptance)


def measure_decode_cost(forward: ForwardFn, device: torch.device, repeats: int = 2) -> DecodeCost:
    """Time decode forwards of _PROBE_ROWS rows of one sequence.

    The rows write k/v into the cache's slots below PROBE_SLOTS, which no sequence owns yet:
    the caller clears them afterwards.
    """
    seconds = [_best_time(forward, rows, device, repeats) for rows in _PROBE_ROWS]
    # Noise must not make a row count look cheaper than a smaller one.
    return DecodeCost(_PROBE_ROWS, tuple(itertools.accumulate(seconds, max)))


# Inference tensors, as the runner builds: a compiled step guards on that, and plain tensors
# recompiled both of its graphs (over a minute on a small CPU) for the probe alone.
@torch.inference_mode()
def _best_time(forward: ForwardFn, rows: int, device: torch.device, repeats: int) -> float:
    positions = torch.arange(_PROBE_CONTEXT, _PROBE_CONTEXT + rows)
    keys = torch.arange(_PROBE_CONTEXT + rows)
    batch = ForwardBatch(
        positions=positions.to(device),
        write_slots=positions.clone().to(device),  # its own tensor, as the runner passes
        read_slots=keys.expand(rows, -1).contiguous().to(device),
        mask=(keys[None, :] <= positions[:, None])[:, None, None, :].to(device),
        query_index=None,
        logits_index=torch.arange(rows).to(device),
        max_query_len=1,
    )
    input_ids = torch.zeros(rows, dtype=torch.int64, device=device)
    best = math.inf
    for _ in range(repeats + 1):  # the first warms caches and lazy initialisation up
        start = time.perf_counter()
        forward(input_ids, batch)[0, 0].item()  # .item(): waits for a GPU to finish
        best = min(best, time.perf_counter() - start)
    return best
