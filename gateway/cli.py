"""The gateway's command line: its flags (GatewayConfig's fields), and running it from them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from common.cli_options import add_flags, build
from common.log_setup import add_log_level, run_command
from gateway.config import GatewayConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, GatewayConfig)


def gateway_config(args: argparse.Namespace) -> GatewayConfig:
    """The config of parsed flags (of a parser that `add_arguments` filled)."""
    return build(GatewayConfig, args)


def gateway_command(args: argparse.Namespace) -> Callable[[], int]:
    """The gateway's run, its config checked first (a bad value raises ValueError here)."""
    config = gateway_config(args)
    return lambda: run(config, args.log_level)


def run(config: GatewayConfig, log_level: str) -> int:
    """Serve until stopped."""
    from gateway.server import run_gateway  # uvicorn and the app only once it runs

    run_gateway(config, log_level)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """`python -m gateway`'s parser: `astrai gateway`'s flags, `--log-level` among them."""
    parser = argparse.ArgumentParser(prog="python -m gateway", description="AstrAI gateway")
    add_log_level(parser)
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m gateway`: the same as `astrai gateway`, without the launcher."""
    return run_command(build_parser(), gateway_command, argv)


if __name__ == "__main__":
    sys.exit(main())
