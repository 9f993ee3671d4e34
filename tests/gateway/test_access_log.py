"""The gateway's access log: /health polls dropped, every other line kept."""

import logging

from gateway.access_log import QuietHealthFilter, quiet_health_polls


def access_record(path: str, status: int = 200) -> logging.LogRecord:
    """A record shaped like uvicorn's access lines."""
    args = ("127.0.0.1:5000", "GET", path, "1.1", status)
    return logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None
    )


def test_health_lines_are_dropped_whatever_their_status_or_query():
    quiet = QuietHealthFilter()
    assert not quiet.filter(access_record("/health", 503))
    assert not quiet.filter(access_record("/health", 200))
    assert not quiet.filter(access_record("/health?verbose=1", 200))


def test_other_lines_are_kept():
    quiet = QuietHealthFilter()
    for path in ("/v1/chat/completions", "/metrics", "/", "/healthz", "/v1/health"):
        assert quiet.filter(access_record(path))
    assert quiet.filter(logging.LogRecord("uvicorn.access", logging.INFO, "", 1, "x", None, None))


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.paths.append(record.args[2])


def test_installed_once_on_uvicorns_access_logger():
    logger = logging.getLogger("uvicorn.access")
    collect = Collect()
    logger.addHandler(collect)
    quiet_health_polls()
    quiet_health_polls()
    try:
        assert sum(isinstance(f, QuietHealthFilter) for f in logger.filters) == 1
        logger.handle(access_record("/health", 503))
        logger.handle(access_record("/v1/messages", 200))
        assert collect.paths == ["/v1/messages"]
    finally:
        logger.removeHandler(collect)
        for f in [f for f in logger.filters if isinstance(f, QuietHealthFilter)]:
            logger.removeFilter(f)
