"""bench.arithmetic_peak: the instruction kinds this CPU has, each at a positive rate."""

from __future__ import annotations

import shutil

import pytest

from bench.arithmetic_peak import peaks
from worker.machine.cpu_info import cpu_flags

pytestmark = pytest.mark.skipif(
    not any(shutil.which(c) for c in ("c++", "g++", "clang++")), reason="no C++ compiler"
)


def test_each_kind_this_cpu_has_is_measured_and_no_other():
    measured = {peak.kind: peak for peak in peaks(threads=1, iterations=200_000)}
    flags = cpu_flags()
    expected = {"fma256", "maddubs256"}  # AVX2, which the kernels need anyway
    if "avx512f" in flags:
        expected.add("fma512")
    if "avx512_vnni" in flags:
        expected |= {"dpbusd512", "dpwssd512"}
    if "avx_vnni" in flags:
        expected.add("dpbusd256")
    assert set(measured) == expected
    assert measured["fma256"].macs_per_instruction == 8
    assert measured["maddubs256"].macs_per_instruction == 32
    assert all(peak.instructions_per_s > 0 for peak in measured.values())
