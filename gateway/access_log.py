"""uvicorn's access log without the `/health` lines: polls by `astrai serve` and probes."""

from __future__ import annotations

import logging

QUIET_PATHS = frozenset({"/health"})


class QuietHealthFilter(logging.Filter):
    """Drops access lines for `QUIET_PATHS`, whatever their status; keeps every other line.

    `astrai serve` polls `/health` five times a second until its workers are up (about 150
    `503` lines for a first start), and orchestrators probe it every few seconds after that.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn's access records carry (client, method, path with query, version, status).
        args = record.args
        if not isinstance(args, tuple) or len(args) < 3 or not isinstance(args[2], str):
            return True
        return args[2].partition("?")[0] not in QUIET_PATHS


def quiet_health_polls() -> None:
    """Install the filter on uvicorn's access logger (once; after uvicorn set up logging)."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, QuietHealthFilter) for f in logger.filters):
        logger.addFilter(QuietHealthFilter())
