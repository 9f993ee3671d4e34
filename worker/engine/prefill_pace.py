"""How many prompt tokens a step feeds while streams decode: sized by the steps' measured time.

Why: every decoding stream waits for a step that carries prompt tokens. One token count for
all machines is a short wait on a fast CPU and a long one on a slow one, and a prompt's later
chunks cost more per token than its first (each attends to every key before it). A time lets
each machine, and each point of a long prompt, feed what fits in it, up to the fixed budget.
Smaller chunks cost a long prompt some speed (each re-reads the keys before it): the default
time trades that against the streams' waits (docs/BENCHMARKS.md, "Prompt steps paced by
time").
"""

from __future__ import annotations

from dataclasses import dataclass

# How far one measured step moves the estimate: the recent ones count most (the next chunk of
# a long prompt costs about what the last one did; the CPU's load changes).
SMOOTHING = 0.5
# Steps feeding fewer rows are not measured: their fixed cost (sampling, the Python around
# the forward) would read as dear rows.
MIN_MEASURED_ROWS = 32
# Never fewer prompt tokens a step (unless the ceiling is lower): with fewer rows a step's
# fixed costs and the weights it reads dominate, and a long prompt crawls.
LEAST = 64
GRAIN = 16  # budgets are multiples of this (a page's tokens, by default)


@dataclass
class PrefillPace:
    """The prompt-token budget of a step while `decode_rows` streams ride in it: as many
    tokens as make the step last about `step_s`, at the seconds per row fed measured so far,
    and never more than `most` (the fixed budget; the budget too until a step with prompt
    tokens was measured, and always where `step_s` is 0). Why a ceiling: a burst of short
    prompts gets its first tokens at the end of the step that feeds them, so on a fast CPU
    fewer, larger steps would make their mean wait longer, not shorter."""

    step_s: float
    most: int
    row_s: float | None = None  # seconds per row fed, smoothed over the measured steps

    def budget(self, decode_rows: int) -> int:
        if self.row_s is None or self.step_s <= 0:
            return self.most
        fits = int(self.step_s / self.row_s) - decode_rows
        return min(self.most, max(LEAST, fits // GRAIN * GRAIN))

    def observe(self, rows: int, seconds: float) -> None:
        """A step that fed prompt tokens: `rows` in all (its decode rows too) in `seconds`."""
        if rows < MIN_MEASURED_ROWS or seconds <= 0:
            return
        measured = seconds / rows
        known = self.row_s
        self.row_s = measured if known is None else known + SMOOTHING * (measured - known)
