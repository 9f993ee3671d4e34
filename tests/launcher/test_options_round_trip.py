"""Every option field survives parse → dataclass → argv → parse, and `astrai serve`'s hand-off.

Values are made up per field from its flag (another choice, a flipped switch, a changed
number), so a field added later is covered without touching this file.
"""

import dataclasses
import os
from dataclasses import dataclass, field

from common.cli_options import Flag, add_flags, build, flags_of, option, to_argv
from gateway import cli as gateway_cli
from gateway.config import GatewayConfig
from launcher.cli import SERVE_EXCLUDES, build_parser, serve_plan
from launcher.serve_options import ServeOptions
from launcher.supervisor import worker_commands
from worker import cli as worker_cli
from worker.engine.options import EngineOptions
from worker.server.process_options import WorkerProcessOptions
from worker.server.worker_config import WorkerConfig

# Fields whose values must look like something (addresses, origins) rather than any text.
SHAPED = {
    "worker_bind": "tcp://10.0.0.1:6000",
    "gateways": ("tcp://10.0.0.2:6000", "tcp://gateways.example:6001"),
    "kv_events_bind": "tcp://10.0.0.2:7000",
    "model_control": "tcp://127.0.0.1:7100",
    "cors_origins": ("https://app.example", "*"),
}


def changed(flag: Flag) -> object:
    """A value the flag accepts that differs from its default."""
    if flag.name in SHAPED:
        return SHAPED[flag.name]
    if flag.kind == "switch":
        return not flag.default
    if flag.kind == "repeat":
        return ("-first", "second")
    if flag.spec.choices:
        return next(choice for choice in flag.spec.choices if choice != flag.default)
    if flag.value_type is str:
        return f"-{flag.name}-value"  # a leading "-" must not read as a flag
    base = flag.default if isinstance(flag.default, int | float) else 6
    return flag.value_type(base + 1) + (0.25 if flag.value_type is float else 0)


def all_changed(cls: type, exclude=frozenset(), **fixed: object) -> dict[str, object]:
    values = {flag.name: changed(flag) for flag in flags_of(cls, exclude)}
    return values | fixed


def test_every_gateway_field_round_trips_through_both_gateway_commands():
    config = GatewayConfig(**all_changed(GatewayConfig))
    assert config != GatewayConfig()
    argv = to_argv(config)
    assert gateway_cli.gateway_config(gateway_cli.build_parser().parse_args(argv)) == config
    parsed = build_parser().parse_args(["gateway", *argv])
    assert gateway_cli.gateway_config(parsed) == config


def test_every_worker_field_round_trips_through_both_worker_commands():
    link = WorkerConfig(**all_changed(WorkerConfig))
    engine = EngineOptions(**all_changed(EngineOptions))
    process = WorkerProcessOptions(**all_changed(WorkerProcessOptions))
    argv = [*to_argv(link), *to_argv(engine), *to_argv(process)]
    for args in (
        worker_cli.build_parser().parse_args(argv),
        build_parser().parse_args(["worker", *argv]),
    ):
        assert build(WorkerConfig, args) == link
        assert build(EngineOptions, args) == engine
        assert build(WorkerProcessOptions, args) == process


def serve_argv(model: str) -> list[str]:
    """`astrai serve` with every one of its flags away from its default."""
    argv = []
    for cls, exclude in SERVE_EXCLUDES.items():
        fixed = {"curve_authorized_keys": None} if cls is GatewayConfig else {}
        if cls is ServeOptions:  # one model: a folder of them is tested with the catalog
            fixed = {"workers": 2, "models": (model,), "models_dir": None}
            fixed |= {"models_file": None, "memory_budget_mb": 10**6}
        if cls is EngineOptions:  # gather: flex with --compile is refused on the CPU
            fixed = {"device": "cpu", "attention": "gather"}
        values = all_changed(cls, exclude, **fixed)
        defaults = {f.name: f.default for f in flags_of(cls)}
        argv += to_argv(cls(**(defaults | values)), exclude)
    return argv


def test_serve_hands_every_engine_and_model_option_to_each_worker(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"")
    args = build_parser().parse_args(["serve", *serve_argv(str(model))])
    plan = serve_plan(args)
    engine = build(EngineOptions, args, SERVE_EXCLUDES[EngineOptions])
    process = build(WorkerProcessOptions, args, SERVE_EXCLUDES[WorkerProcessOptions])
    assert engine != EngineOptions(num_threads=engine.num_threads)  # the flags did change it
    process = dataclasses.replace(process, model=str(model))
    assert [c.package for c in plan.workers] == ["worker", "worker"]
    for i, command in enumerate(plan.workers):
        worker_args = worker_cli.build_parser().parse_args(command.argv)
        assert worker_args.log_level == "info"
        got = build(EngineOptions, worker_args)
        assert got.num_threads is not None and got.num_threads >= 1
        assert got == dataclasses.replace(engine, num_threads=got.num_threads)
        assert build(WorkerProcessOptions, worker_args) == process  # health_port: None
        link = build(WorkerConfig, worker_args)
        assert (link.gateways, link.worker_id) == ((plan.gateway.worker_bind,), f"worker-{i}")
        assert link.curve_server_key == plan.gateway.curve_secret_key is not None


def test_serve_puts_worker_i_on_cuda_i_and_splits_the_cores():
    gateway = GatewayConfig()
    engine = EngineOptions(device="cuda", quantization="none")
    commands = worker_commands(3, gateway, engine, WorkerProcessOptions(), "warning")
    parsed = [worker_cli.build_parser().parse_args(c.argv) for c in commands]
    assert [build(EngineOptions, a).device for a in parsed] == ["cuda:0", "cuda:1", "cuda:2"]
    threads = max(1, (os.cpu_count() or 1) // 3)
    assert [build(EngineOptions, a).num_threads for a in parsed] == [threads] * 3
    (single,) = worker_commands(1, gateway, engine, WorkerProcessOptions(), "warning")
    assert build(EngineOptions, worker_cli.build_parser().parse_args(single.argv)).device == "cuda"


def test_a_new_engine_field_reaches_the_worker_through_serve():
    """One field plus its help text: a flag on `serve`, then in each worker's argv."""

    @dataclass(frozen=True)
    class NewEngineOptions(EngineOptions):
        draft_tokens: int = field(default=0, metadata=option("tokens drafted per step"))

    engine = NewEngineOptions(draft_tokens=4)
    (command,) = worker_commands(1, GatewayConfig(), engine, WorkerProcessOptions(), "info")
    assert "--draft-tokens=4" in command.argv
    parser = worker_cli.build_parser()
    add_flags(parser, NewEngineOptions, exclude={f.name for f in flags_of(EngineOptions)})
    got = build(NewEngineOptions, parser.parse_args(command.argv))
    assert got == dataclasses.replace(engine, num_threads=got.num_threads)
