"""`astrai serve`'s supervisor: its children's commands, the ready line and the readiness poll."""

import socket
import threading

from gateway.config import GatewayConfig
from launcher.supervisor import gateway_command, ready_message, workers_ready


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


def test_a_port_answered_in_another_protocol_is_not_ready_yet():
    # A ZeroMQ socket (another process's ephemeral bind) holding the gateway's port answers
    # with its greeting; the poll waits (the gateway then exits on the taken port) instead of
    # raising.
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()

    def greet() -> None:
        connection, _ = held.accept()
        with connection:
            connection.sendall(b"\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f")

    thread = threading.Thread(target=greet, daemon=True)
    thread.start()
    try:
        assert workers_ready(f"http://127.0.0.1:{held.getsockname()[1]}") is None
    finally:
        thread.join(5)
        held.close()
