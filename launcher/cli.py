"""The `astrai` command line: serve, gateway, worker, keys, bench."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from common.cli_options import add_flags, build
from common.log_setup import add_log_level, run_command
from common.ports import free_loopback_port
from gateway import cli as gateway_cli
from gateway.config import GatewayConfig
from launcher.model_catalog import ModelSpec, build_catalog
from launcher.serve_options import ServeOptions
from launcher.supervisor import ModelPlan, ServePlan, run_serve, worker_commands
from worker import cli as worker_cli
from worker.engine.options import EngineOptions
from worker.server.process_options import WorkerProcessOptions

# Fields `astrai serve` decides itself rather than take as flags: the worker socket is its
# own `--worker-bind` (ServeOptions), the model-control socket its own, the threads are the
# cores split between the workers, health ports would collide between local workers, and
# `--model` (repeatable) is ServeOptions' list of models.
SERVE_EXCLUDES: dict[type, frozenset[str]] = {
    GatewayConfig: frozenset({"worker_bind", "model_control"}),
    WorkerProcessOptions: frozenset({"health_port", "model"}),
    EngineOptions: frozenset({"num_threads"}),
    ServeOptions: frozenset(),
}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    for cls, exclude in SERVE_EXCLUDES.items():
        add_flags(parser, cls, exclude)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="astrai", description="AstrAI Serve")
    add_log_level(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_arguments(sub.add_parser("serve", help="a gateway plus N local workers"))
    gateway_cli.add_arguments(sub.add_parser("gateway", help="the HTTP gateway alone"))
    worker_cli.add_arguments(
        sub.add_parser("worker", help="one worker process that dials a gateway")
    )
    keys = sub.add_parser("keys", help="generate a CURVE key pair for a gateway or worker")
    keys.add_argument("--out", default="keys", help="folder for NAME.key and NAME.key_secret")
    keys.add_argument("--name", default="gateway")

    from bench.cli import add_arguments

    add_arguments(sub.add_parser("bench", help="load generator: sweep a server, report, plot"))
    return parser


def serve_plan(args: argparse.Namespace) -> ServePlan:
    """What `astrai serve` runs, its options all checked (a bad one raises ValueError)."""
    serve = build(ServeOptions, args)
    if args.curve_authorized_keys is not None:
        raise SystemExit(
            "--curve-authorized-keys restricts remote workers: run `astrai gateway` and "
            "`astrai worker --curve-secret-key ...` for that"
        )
    worker_bind = serve.worker_bind or f"tcp://127.0.0.1:{free_loopback_port()}"
    gateway = build(GatewayConfig, args, SERVE_EXCLUDES[GatewayConfig], worker_bind=worker_bind)
    engine = build(EngineOptions, args, SERVE_EXCLUDES[EngineOptions])
    process = build(WorkerProcessOptions, args, SERVE_EXCLUDES[WorkerProcessOptions])
    defaults = ModelSpec(None, engine, serve.workers, serve.model_ttl_s)
    catalog = build_catalog(serve.models, serve.models_dir, serve.models_file, defaults)
    models = []
    for spec in catalog:
        entry = spec.catalog_entry()
        prefix = "worker" if len(catalog) == 1 else f"{entry.name}-worker"
        with_model = dataclasses.replace(process, model=spec.path)
        commands = worker_commands(
            spec.workers, gateway, spec.engine, with_model, args.log_level, prefix
        )
        models.append(ModelPlan(entry, commands))
    budget = serve.budget_mb()
    preloaded = sum(m.entry.estimate_mb for m in models if m.entry.preload)
    if preloaded > budget:
        raise ValueError(
            f"the models loaded at start need about {preloaded} MiB, over the memory budget of "
            f"{budget} MiB (--memory-budget-mb)"
        )
    return ServePlan(gateway, tuple(models), serve.startup_timeout_s, budget)


def _keys(args: argparse.Namespace) -> int:
    from common.curve import generate_keys

    public, secret = generate_keys(Path(args.out), args.name)
    print(f"public key (share it): {public}\nsecret key (keep it):  {secret}")
    return 0


def _command(args: argparse.Namespace) -> Callable[[], int]:
    """What the parsed command runs, built before it runs so that bad values stop it here."""
    if args.command == "gateway":
        return gateway_cli.gateway_command(args)
    if args.command == "worker":
        return worker_cli.worker_command(args)
    if args.command == "keys":
        return lambda: _keys(args)
    if args.command == "bench":
        from bench.cli import run

        return lambda: run(args)
    plan = serve_plan(args)
    return lambda: run_serve(plan, args.log_level)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), _command, argv)


if __name__ == "__main__":
    sys.exit(main())
