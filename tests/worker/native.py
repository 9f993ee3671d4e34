"""Shared by the native-kernel tests: build once, skip with the reason when this machine can't."""

from __future__ import annotations

import pytest

from worker.kernels.build import native_kernels_available
from worker.kernels.ggml_build import ggml_kernels_available

needs_native_kernels = pytest.mark.skipif(
    not native_kernels_available(),
    reason="the native CPU kernels could not be built here (no C++ compiler, or "
    "ASTRAI_NATIVE_KERNELS=0): the engine uses torch's kernels instead",
)

needs_ggml = pytest.mark.skipif(
    not ggml_kernels_available(),
    reason="ggml's CPU kernels could not be built here (no cmake or C++ compiler, the "
    "llama-cpp-python sdist not downloadable, or ASTRAI_GGML_KERNELS=0)",
)
