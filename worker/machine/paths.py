"""Where the worker keeps what it derives once and reuses: converted models, built kernels."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$ASTRAI_CACHE_DIR`, else `$XDG_CACHE_HOME/astrai`, else `~/.cache/astrai`."""
    env = os.environ.get("ASTRAI_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "astrai"
