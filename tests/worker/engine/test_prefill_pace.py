"""PrefillPace: a step's prompt tokens from the measured seconds per row."""

from __future__ import annotations

import pytest

from worker.engine.prefill_pace import LEAST, MIN_MEASURED_ROWS, PrefillPace


def test_the_budget_holds_until_a_step_is_measured():
    pace = PrefillPace(step_s=0.2, most=256)
    assert pace.budget(decode_rows=8) == 256
    pace.observe(rows=MIN_MEASURED_ROWS - 1, seconds=5.0)  # too few rows: fixed costs dominate
    assert pace.row_s is None and pace.budget(8) == 256


def test_the_budget_fills_the_step_time_less_the_decode_rows_riding():
    pace = PrefillPace(step_s=0.2, most=1024)
    pace.observe(rows=400, seconds=0.4)  # 1 ms a row: 200 rows fit in 0.2 s
    assert pace.row_s == pytest.approx(1e-3)
    assert pace.budget(decode_rows=0) == 192  # 200, in multiples of 16
    assert pace.budget(decode_rows=40) == 160
    assert pace.budget(decode_rows=150) == LEAST  # never fewer: a long prompt must go on


def test_a_slow_cpu_gets_fewer_tokens_and_a_fast_one_the_ceiling():
    slow, fast = PrefillPace(step_s=0.2, most=256), PrefillPace(step_s=0.2, most=256)
    slow.observe(rows=300, seconds=0.6)  # 2 ms a row
    fast.observe(rows=300, seconds=0.075)  # 0.25 ms a row: 784 would fit
    assert (slow.budget(4), fast.budget(4)) == (96, 256)


def test_each_measured_step_moves_the_estimate_halfway():
    pace = PrefillPace(step_s=0.2, most=1024)
    pace.observe(rows=100, seconds=0.1)
    pace.observe(rows=100, seconds=0.3)  # a later chunk of a long prompt: dearer rows
    assert pace.row_s == pytest.approx(2e-3)
    assert pace.budget(0) == 96  # 100 rows fit
    pace.observe(rows=100, seconds=0.0)  # not a measurement
    assert pace.row_s == pytest.approx(2e-3)
