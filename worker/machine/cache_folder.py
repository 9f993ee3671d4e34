"""A cache folder made once, whole or not at all, however many processes ask at the same time."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def made_once(target: Path, marker: str, make: Callable[[Path], None]) -> Path:
    """`target`, whose `marker` file says it is whole: when missing, `make(folder)` fills a
    private folder beside it (the marker last), which is then renamed into place, so that
    workers starting together never see half of one; when another got there first, theirs."""
    if (target / marker).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        make(staging)
        try:
            staging.rename(target)
        except OSError:  # another process's folder is there already
            if not (target / marker).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
