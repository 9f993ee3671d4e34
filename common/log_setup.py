"""The log format and level of every astrai process, and the `--log-level` flag that sets it."""

from __future__ import annotations

import argparse
import logging


def add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error")


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise
