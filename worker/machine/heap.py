"""Hand the C heap's freed memory back to the system, after a one-off burst of allocations."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    trim: Callable[[int], int] | None = getattr(libc, "malloc_trim", None)  # glibc only
    return trim


def release_freed_heap() -> bool:
    """Return the heap's free pages to the system (glibc keeps freed blocks below its mmap
    threshold mapped, and they count in the process's RSS until reused). False where the C
    library has no malloc_trim."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
