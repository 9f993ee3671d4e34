"""Shared by the native-kernel tests: build once, skip with the reason when this machine can't."""

from __future__ import annotations

import pytest

from worker.kernels.build import native_kernels_available

needs_native_kernels = pytest.mark.skipif(
    not native_kernels_available(),
    reason="the native CPU kernels could not be built here (no C++ compiler, or "
    "ASTRAI_NATIVE_KERNELS=0): the engine uses torch's kernels instead",
)
