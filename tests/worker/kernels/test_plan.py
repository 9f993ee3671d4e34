"""The kernel probe: a valid plan measured here, cached per CPU, read back as it was written."""

from __future__ import annotations

import json

import pytest

from worker.kernels import plan as plan_module
from worker.kernels.build import native_kernels_available
from worker.kernels.plan import FLOAT32_LAYOUTS, KernelPlan
from worker.model.kernel_probe import PANEL_CANDIDATE_ROWS, measure


@pytest.mark.slow  # it times every candidate kernel: seconds
def test_measure_picks_among_the_candidates_and_records_what_it_timed():
    plan = measure()
    assert plan.float32_layout in FLOAT32_LAYOUTS
    assert plan.panel_rows in (0, *PANEL_CANDIDATE_ROWS)
    assert all(ms > 0 for ms in plan.measured_ms.values())
    assert "float32 mm 1 rows" in plan.measured_ms
    if native_kernels_available():
        assert "q4_1 direct 8 rows" in plan.measured_ms
    assert plan.describe().startswith("block panel kernel")


def test_the_plan_is_measured_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRAI_CACHE_DIR", str(tmp_path))
    measured = []
    fixed = KernelPlan(24, "linear", {"float32 linear 1 rows": 1.5})

    def measure_here() -> KernelPlan:
        measured.append(1)
        return fixed

    monkeypatch.setattr(plan_module, "cpu_busy", lambda: False)
    plan_module.kernel_plan.cache_clear()
    try:
        first = plan_module.kernel_plan(measure_here)
        plan_module.kernel_plan.cache_clear()
        second = plan_module.kernel_plan(measure_here)
    finally:
        plan_module.kernel_plan.cache_clear()
    assert first == second == fixed
    assert second.measured_ms == fixed.measured_ms
    assert measured == [1]
    (saved,) = (tmp_path / "kernels").glob("plan-*.json")
    assert json.loads(saved.read_text())["float32_layout"] == "linear"


def test_an_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="float32_layout"):
        KernelPlan(16, "blas")


def test_a_plan_measured_on_a_busy_cpu_is_provisional_until_a_quiet_start(tmp_path, monkeypatch):
    """Busy: measured and cached as provisional; busy still: taken from the cache as it is;
    quiet: measured again and cached for good, then taken busy or quiet."""
    monkeypatch.setenv("ASTRAI_CACHE_DIR", str(tmp_path))
    measured: list[KernelPlan] = []
    busy_plan = KernelPlan(16, "mm", {"float32 mm 1 rows": 9.0})
    quiet_plan = KernelPlan(24, "linear", {"float32 linear 1 rows": 1.5})

    def measure_here() -> KernelPlan:
        measured.append(busy_plan if plan_module.cpu_busy() else quiet_plan)
        return measured[-1]

    plans = []
    plan_module.kernel_plan.cache_clear()
    try:
        for busy in (True, True, False, True, False):
            monkeypatch.setattr(plan_module, "cpu_busy", lambda busy=busy: busy)
            plans.append(plan_module.kernel_plan(measure_here))
            plan_module.kernel_plan.cache_clear()
    finally:
        plan_module.kernel_plan.cache_clear()
    assert plans == [busy_plan, busy_plan, quiet_plan, quiet_plan, quiet_plan]
    assert measured == [busy_plan, quiet_plan]
    (saved,) = (tmp_path / "kernels").glob("plan-*.json")
    assert json.loads(saved.read_text())["provisional"] is False


def test_the_k_quant_rows_survive_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRAI_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ASTRAI_KQUANT_PANEL_ROWS", raising=False)
    fixed = KernelPlan(16, "mm", {}, {"Q4_K": 16, "Q6_K": 0}, {"Q4_K": 16, "Q6_K": 32})
    monkeypatch.setattr(plan_module, "cpu_busy", lambda: False)
    plan_module.kernel_plan.cache_clear()
    try:
        plan_module.kernel_plan(lambda: fixed)
        plan_module.kernel_plan.cache_clear()
        again = plan_module.kernel_plan(lambda: fixed)
    finally:
        plan_module.kernel_plan.cache_clear()
    assert again.kquant_panel_rows == {"Q4_K": 16, "Q6_K": 0}
    assert again.kquant_tiles_rows == {"Q4_K": 16, "Q6_K": 32}
    assert "K-quant panels: Q4_K from 16 rows, Q6_K never" in again.describe()
    assert "K-quant tile unit: Q4_K from 16 rows, Q6_K from 32 rows" in again.describe()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (None, {"Q4_K": 16, "Q6_K": 32}),
        ("1", {"Q4_K": 1, "Q6_K": 1}),
        ("Q6_K=0", {"Q4_K": 16, "Q6_K": 0}),
        ("Q4_K=8, Q6_K=64", {"Q4_K": 8, "Q6_K": 64}),
    ],
)
def test_the_environment_pins_the_k_quant_rows(setting, expected):
    measured = KernelPlan(16, "mm", {}, {"Q4_K": 16, "Q6_K": 32})
    assert plan_module.with_kquant_override(measured, setting).kquant_panel_rows == expected


@pytest.mark.parametrize("setting", ["Q5_K=8", "-1", "Q4_K=many"])
def test_a_bad_k_quant_setting_names_the_variable_and_the_form(setting):
    with pytest.raises(ValueError, match=r"ASTRAI_KQUANT_PANEL_ROWS=.*TYPE=rows"):
        plan_module.with_kquant_override(KernelPlan(), setting)
