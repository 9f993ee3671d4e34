"""The worker's command line: its flags (the fields of its options classes), and running it."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import socket
import sys
import uuid
from collections.abc import Callable, Sequence

from common.cli_options import add_flags, build
from common.log_setup import add_log_level, run_command
from worker.engine.options import EngineOptions
from worker.server.process_options import WorkerProcessOptions
from worker.server.worker_config import WorkerConfig

OPTION_CLASSES = (WorkerConfig, WorkerProcessOptions, EngineOptions)

log = logging.getLogger(__name__)

# A worker that cannot load its model exits with this: `astrai serve` does not start it again
# (it would fail the same way) and says why the model failed.
CANNOT_LOAD_EXIT = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for cls in OPTION_CLASSES:
        add_flags(parser, cls)


def worker_command(args: argparse.Namespace) -> Callable[[], int]:
    """The worker's run, its options all checked (a bad one raises ValueError here)."""
    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    link = build(WorkerConfig, args, worker_id=worker_id)
    engine = build(EngineOptions, args)
    process = build(WorkerProcessOptions, args)
    return lambda: run(link, engine, process)


def run(link: WorkerConfig, engine: EngineOptions, process: WorkerProcessOptions) -> int:
    """Load the model, then serve until drained or stopped."""
    from worker.engine.inference_engine import InferenceEngine  # torch: only once it runs
    from worker.server.process import serve_worker

    try:
        inference = InferenceEngine(process.model, **dataclasses.asdict(engine))
    except (OSError, ValueError, KeyError) as exc:
        # A bad model file or folder: one line naming it and the cause, not a traceback.
        log.error("cannot serve the model: %s", exc)
        return CANNOT_LOAD_EXIT
    serve_worker(inference, link, process.health_port)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """`python -m worker`'s parser: `astrai worker`'s flags, `--log-level` among them."""
    parser = argparse.ArgumentParser(prog="python -m worker", description="AstrAI worker")
    add_log_level(parser)
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m worker`: the same as `astrai worker`, without the launcher."""
    return run_command(build_parser(), worker_command, argv)


if __name__ == "__main__":
    sys.exit(main())
