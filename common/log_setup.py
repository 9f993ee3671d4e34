"""How every astrai command starts: the `--log-level` flag, the log format, and `run_command`."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence


def add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error")


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise


def run_command(
    parser: argparse.ArgumentParser,
    make_command: Callable[[argparse.Namespace], Callable[[], int]],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse `argv`, build the command (its options all checked: a value the flag's type
    allows but an options class refuses is a usage error, exit 2, before anything starts),
    then configure logging and run it."""
    args = parser.parse_args(argv)
    try:
        command = make_command(args)
    except ValueError as exc:
        parser.error(str(exc))
    configure_logging(args.log_level)
    return command()
