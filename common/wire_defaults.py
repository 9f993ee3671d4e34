"""The wire's defaults that option classes need, apart from the codec (which imports the
message schemas and pydantic: a tenth of a second `astrai serve` paid before starting
anything)."""

from __future__ import annotations

DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
DEFAULT_WORKER_BIND = "tcp://127.0.0.1:5557"
