"""`--chat-template FILE` through `astrai serve`: chats render through the file's template;
a file that cannot be read or parsed stops the start with one line naming it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.server import REPO, free_loopback_port
from tests.conftest import TINY_NAME
from tests.e2e.harness import Server
from worker.text.tokenizer import Tokenizer

pytestmark = pytest.mark.slow
TEMPLATE = (
    "{% for m in messages %}<<{{ m.role }}:{{ m.content }}>>{% endfor %}"
    "{% if add_generation_prompt %}<<assistant:{% endif %}"
)
CHAT = [{"role": "user", "content": "Hi there"}]


def test_chats_render_through_the_given_template(tiny_model_dir: Path, tmp_path: Path):
    template = tmp_path / "template.jinja"
    template.write_text(TEMPLATE)
    expected = Tokenizer(tiny_model_dir, chat_template=TEMPLATE).encode_chat(CHAT)
    assert expected != Tokenizer(tiny_model_dir).encode_chat(CHAT)
    server = Server(
        "serve",
        "--model",
        str(tiny_model_dir),
        "--kv-cache-mb",
        "16",
        "--chat-template",
        str(template),
    )
    try:
        server.wait_ready()
        body = {"model": TINY_NAME, "messages": CHAT}
        reply = httpx.post(f"{server.url}/tokenize", json=body, timeout=30).json()
        assert reply["tokens"] == expected
        text = httpx.post(f"{server.url}/detokenize", json={"tokens": expected}, timeout=30)
        assert text.json()["prompt"] == "<<user:Hi there>><<assistant:"
    finally:
        server.stop()
        assert not server.group_alive()


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot be read"), ("{% for m in messages %}", "line 1: Unexpected end of template")],
)
def test_a_bad_template_file_stops_serve_with_one_line_naming_it(
    tiny_model_dir: Path, tmp_path: Path, content: str | None, message: str
):
    template = tmp_path / "template.jinja"
    if content is not None:
        template.write_text(content)
    argv = [sys.executable, "-m", "launcher", "serve", "--model", str(tiny_model_dir)]
    argv += ["--port", str(free_loopback_port()), "--chat-template", str(template)]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Traceback" not in output
    assert f"chat template {template}: {message}" in output
