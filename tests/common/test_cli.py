"""The command line: gateway flags reach GatewayConfig, and `astrai serve` passes them on."""

from common.cli import build_parser, gateway_config
from common.supervisor import _gateway_argv


def test_cors_origins_reach_the_gateway_config():
    args = build_parser().parse_args(
        ["gateway", "--cors-origin", "http://localhost:3000", "--cors-origin", "*"]
    )
    assert gateway_config(args).cors_origins == ("http://localhost:3000", "*")


def test_cors_is_off_by_default():
    assert gateway_config(build_parser().parse_args(["gateway"])).cors_origins == ()


def test_serve_passes_gateway_options_to_its_gateway():
    serve = build_parser().parse_args(
        [
            "serve",
            "--cors-origin",
            "https://app.example",
            "--cors-origin",
            "http://localhost:5173",
            "--api-key",
            "k",
            "--max-in-flight",
            "8",
        ]
    )
    argv = _gateway_argv(serve, "tcp://127.0.0.1:5999")
    config = gateway_config(build_parser().parse_args(argv))
    assert config.cors_origins == ("https://app.example", "http://localhost:5173")
    assert (config.api_key, config.max_in_flight) == ("k", 8)
    assert config.worker_bind == "tcp://127.0.0.1:5999"


def test_no_console_reaches_the_gateway_of_serve():
    assert gateway_config(build_parser().parse_args(["gateway"])).console is True
    serve = build_parser().parse_args(["serve", "--no-console"])
    argv = _gateway_argv(serve, "tcp://127.0.0.1:5999")
    assert gateway_config(build_parser().parse_args(argv)).console is False
