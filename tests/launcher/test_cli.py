"""The command line: flags reach the options classes, and `astrai serve` passes them on."""

import pytest

from gateway import cli as gateway_cli
from launcher.cli import build_parser, main, serve_plan
from launcher.supervisor import gateway_command
from worker.engine import options


def gateway_config_of(argv: list[str]):
    return gateway_cli.gateway_config(build_parser().parse_args(argv))


def child_gateway_config(serve_argv: list[str]):
    """The GatewayConfig that `astrai serve <serve_argv>`'s gateway child builds."""
    plan = serve_plan(build_parser().parse_args(["serve", *serve_argv]))
    command = gateway_command(plan.gateway, "info")
    assert command.package == "gateway"
    return gateway_cli.gateway_config(gateway_cli.build_parser().parse_args(command.argv))


def test_cors_origins_reach_the_gateway_config():
    config = gateway_config_of(
        ["gateway", "--cors-origin", "http://localhost:3000", "--cors-origin", "*"]
    )
    assert config.cors_origins == ("http://localhost:3000", "*")


def test_cors_is_off_by_default():
    assert gateway_config_of(["gateway"]).cors_origins == ()


def test_serve_passes_gateway_options_to_its_gateway():
    argv = ["--cors-origin", "https://app.example", "--cors-origin", "http://localhost:5173"]
    argv += ["--api-key", "k", "--max-in-flight", "8", "--worker-bind", "tcp://127.0.0.1:5999"]
    config = child_gateway_config(argv)
    assert config.cors_origins == ("https://app.example", "http://localhost:5173")
    assert (config.api_key, config.max_in_flight) == ("k", 8)
    assert config.worker_bind == "tcp://127.0.0.1:5999"


def test_serve_picks_a_free_loopback_worker_socket_by_default():
    bind = child_gateway_config([]).worker_bind
    assert bind.startswith("tcp://127.0.0.1:") and bind != "tcp://127.0.0.1:5557"


def test_no_console_reaches_the_gateway_of_serve():
    assert gateway_config_of(["gateway"]).console is True
    assert child_gateway_config(["--no-console"]).console is False


def test_api_key_defaults_to_the_environment(monkeypatch):
    monkeypatch.setenv("ASTRAI_API_KEY", "from-env")
    assert gateway_config_of(["gateway"]).api_key == "from-env"
    assert child_gateway_config([]).api_key == "from-env"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--workers", "0"], "--workers must be >= 1, got 0"),
        (["gateway", "--port", "0"], "port must be in 1..65535, got 0"),
        (["worker", "--max-seqs", "0"], "max_seqs must be >= 1, got 0"),
        (["serve", "--prefill-step-ms", "-1"], "prefill_step_ms must be >= 0, got -1"),
        (["worker", "--gateway", "localhost:5557"], "gateway must be a ZeroMQ address"),
        (["worker", "--gateway", "tcp://gateways"], "gateway must be a ZeroMQ address"),
        (["worker", "--gateway", "tcp://a:1", "--gateway", "b"], "got 'b'"),
    ],
)
def test_a_refused_value_is_a_usage_error_before_anything_starts(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("has_vnni", [False, True])
def test_int8_is_a_usage_error_on_a_cpu_without_an_int8_dot_product(has_vnni, monkeypatch, capsys):
    monkeypatch.setattr(options, "has_int8_dot_product", lambda: has_vnni)
    argv = ["serve", "--quantization", "int8"]
    if has_vnni:
        plan = serve_plan(build_parser().parse_args(argv))
        assert "--quantization=int8" in plan.workers[0].argv
        return
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "int8 dot-product instruction (AVX512-VNNI, AVX-VNNI or AMX)" in capsys.readouterr().err
    # On a GPU the CPU's instructions do not matter.
    assert options.EngineOptions(device="cuda", quantization="int8").quantization == "int8"


def test_serve_refuses_an_allow_list_of_remote_workers():
    with pytest.raises(SystemExit, match="restricts remote workers"):
        main(["serve", "--curve-secret-key", "k", "--curve-authorized-keys", "folder"])


def test_flags_and_defaults_kept_from_before():
    """Every flag of before, with its default (the generated parser must not drop one)."""
    parser = build_parser()
    serve = vars(parser.parse_args(["serve"]))
    assert serve["workers"] == 1 and serve["worker_bind"] is None
    assert serve["startup_timeout_s"] == 600.0 and serve["models"] == []
    assert (serve["host"], serve["port"], serve["routing"]) == ("127.0.0.1", 8000, "exact")
    assert (serve["heartbeat_timeout_s"], serve["max_body_bytes"]) == (3.0, 8 * 1024 * 1024)
    assert (serve["max_in_flight"], serve["max_queued"]) == (256, 512)
    assert (serve["queue_timeout_s"], serve["drain_timeout_s"]) == (30.0, 30.0)
    assert (serve["header_timeout_s"], serve["body_timeout_s"]) == (10.0, 30.0)
    assert (serve["device"], serve["dtype"], serve["quantization"]) == ("cpu", "auto", "auto")
    assert (serve["kv_cache_mb"], serve["max_seqs"], serve["max_model_len"]) == (1024, 64, None)
    assert (serve["prefill_token_budget"], serve["enable_prefix_caching"]) == (256, True)
    assert serve["prefill_step_ms"] == 250
    assert (serve["compile"], serve["console"], serve["cors_origins"]) == (False, True, [])
    assert "num_threads" not in serve and "health_port" not in serve
    worker = vars(parser.parse_args(["worker"]))
    assert (worker["gateways"], worker["worker_id"]) == (["tcp://127.0.0.1:5557"], None)
    assert (worker["num_threads"], worker["health_port"]) == (None, None)
    assert (worker["curve_server_key"], worker["curve_secret_key"]) == (None, None)
    gateway = vars(parser.parse_args(["gateway"]))
    assert gateway["worker_bind"] == "tcp://127.0.0.1:5557"
    parsed = parser.parse_args(
        ["worker", "--threads", "3", "--no-prefix-caching", "--compile", "--dtype", "bfloat16"]
    )
    assert (parsed.num_threads, parsed.enable_prefix_caching, parsed.compile) == (3, False, True)
    keys = parser.parse_args(["keys"])
    assert (keys.out, keys.name) == ("keys", "gateway")


def test_served_model_name_takes_several_names_and_patterns():
    from common.cli_options import build
    from launcher.cli import SERVE_EXCLUDES

    args = build_parser().parse_args(["serve", "--served-model-name", "mine", "claude-*"])
    engine = build(options.EngineOptions, args, SERVE_EXCLUDES[options.EngineOptions])
    assert engine.served_model_name == ("mine", "claude-*")
    assert options.EngineOptions(served_model_name="one").served_model_name == ("one",)
    with pytest.raises(ValueError, match="only at its end"):
        options.EngineOptions(served_model_name=("cl*ude",))
