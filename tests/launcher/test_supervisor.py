"""`astrai serve`'s supervisor: its children's commands and the ready line."""

from gateway.config import GatewayConfig
from launcher.supervisor import gateway_command, ready_message


def test_the_ready_line_gives_the_urls_to_use():
    assert ready_message(GatewayConfig(port=8123), 2).splitlines() == [
        "AstrAI Serve ready at http://127.0.0.1:8123 (2 worker(s))",
        "  web console        http://127.0.0.1:8123/",
        "  OpenAI API         http://127.0.0.1:8123/v1/chat/completions",
        "  Anthropic API      http://127.0.0.1:8123/v1/messages",
        "  Prometheus metrics http://127.0.0.1:8123/metrics",
    ]


def test_without_the_console_the_ready_line_does_not_offer_it():
    lines = ready_message(GatewayConfig(console=False), 1).splitlines()
    assert lines[0] == "AstrAI Serve ready at http://127.0.0.1:8000 (1 worker(s))"
    assert not any("console" in line for line in lines)
    assert len(lines) == 4


def test_the_gateway_child_runs_the_gateway_package_not_the_launcher():
    command = gateway_command(GatewayConfig(max_queued=3), "warning")
    assert command.package == "gateway"
    assert command.argv[:2] == ("--log-level", "warning")
    assert "--max-queued=3" in command.argv
