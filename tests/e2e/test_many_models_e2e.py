"""Several models behind one `astrai serve`: the default chat model (pinned, loaded at start),
an embedding model and a reranker loaded on their first request, within a memory budget that
holds two of them at once, one that never fits, and an idle TTL. Real processes, real HTTP,
the official openai SDK."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import Server, http_json, wait_until
from tests.e2e.sdk import openai_client
from tests.worker.embedding_model import build_embedding_model
from tests.worker.rerank_model import build_reranker

pytestmark = pytest.mark.slow
CHAT = "SmolLM2-135M-Instruct"
# The chat model and one small model fit; the chat model and both small ones do not.
BUDGET_MB = 1000
TTL_S = 3
STREAM_TOKENS = 48


@pytest.fixture(scope="module")
def models_file(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Path:
    folder = tmp_path_factory.mktemp("models")
    build_embedding_model(folder / "qwen3-embed", default_model_dir)
    build_reranker(folder / "qwen3-rerank", default_model_dir)
    (folder / "broken").mkdir()  # a model folder whose worker cannot load it: no weights
    (folder / "broken" / "config.json").write_text('{"model_type": "llama"}')
    path = folder / "models.toml"
    path.write_text(
        f"""
[defaults]
kv_cache_mb = 16
dtype = "float32"

[[model]]
path = "default"
pinned = true
preload = true

[[model]]
path = "qwen3-embed"
name = "embed"

[[model]]
path = "qwen3-rerank"
name = "rerank"
ttl = {TTL_S}

[[model]]
path = "qwen3-rerank"
name = "huge"
kv_cache_mb = 4096

[[model]]
path = "broken"
"""
    )
    return path


@pytest.fixture(scope="module")
def server(models_file: Path) -> Iterator[Server]:
    running = Server("serve", "--models", str(models_file), "--memory-budget-mb", str(BUDGET_MB))
    try:
        yield running.wait_ready()
    finally:
        running.stop()
        assert not running.group_alive(), "astrai serve left processes behind"


def statuses(server: Server) -> dict[str, str]:
    return {name: m["status"] for name, m in server.stats()["models"].items()}


class MemoryWatch:
    """Samples the loaded models' memory (summed) from /stats while a block runs."""

    def __init__(self, server: Server) -> None:
        self.server, self.samples = server, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self._stop.is_set():
            models = self.server.stats()["models"].values()
            self.samples.append(sum(m["memory_mb"] for m in models))
            time.sleep(0.1)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def rerank(server: Server, model: str = "rerank") -> httpx.Response:
    body = {"model": model, "query": "capital of France", "documents": ["Paris", "Berlin"]}
    return httpx.post(f"{server.url}/v1/rerank", json=body, timeout=120)


def chat_stream(server: Server, out: list[dict]) -> None:
    """A greedy stream of STREAM_TOKENS tokens (EOS ignored); its chunks into `out`."""
    body = {
        "model": CHAT,
        "messages": [{"role": "user", "content": "Count from one to twenty."}],
        "max_tokens": STREAM_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                out.append(json.loads(line[6:]))


def test_the_models_are_listed_with_their_state_and_only_the_first_runs(server: Server):
    _, listed = http_json(f"{server.url}/v1/models")
    states = {m["id"]: m["status"]["value"] for m in listed["data"]}
    assert states == {
        CHAT: "loaded",
        "embed": "unloaded",
        "rerank": "unloaded",
        "huge": "unloaded",
        "broken": "unloaded",
    }
    stats = server.stats()
    assert stats["gateway"]["memory_budget_mb"] == BUDGET_MB
    assert stats["models"][CHAT]["pinned"] and stats["models"][CHAT]["memory_mb"] > 0
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert 'astrai_model_state{model="embed",state="unloaded"} 1.0' in metrics
    assert "astrai_model_memory_budget_bytes " in metrics


def test_a_model_loads_on_its_first_request_while_another_streams_unharmed(server: Server):
    chunks: list[dict] = []
    streaming = threading.Thread(target=chat_stream, args=(server, chunks))
    with MemoryWatch(server) as watch:
        streaming.start()
        answer = openai_client(server).embeddings.create(model="embed", input=["hello", "world"])
        streaming.join()
    assert [len(d.embedding) for d in answer.data] == [len(answer.data[0].embedding)] * 2
    assert statuses(server)["embed"] == "loaded"
    # The stream beside the load lost nothing: every token it was to write, then its end.
    *_, last_choice, usage = chunks
    assert usage["usage"]["completion_tokens"] == STREAM_TOKENS
    assert last_choice["choices"][0]["finish_reason"] == "length"
    assert max(watch.samples) <= BUDGET_MB


def test_the_least_recently_used_model_makes_room_and_the_budget_holds(server: Server):
    with MemoryWatch(server) as watch:
        reply = rerank(server)
    assert reply.status_code == 200, reply.text
    assert [r["index"] for r in reply.json()["results"]] != []
    assert statuses(server) | {"huge": "-", "broken": "-"} == {
        CHAT: "loaded",  # pinned
        "embed": "unloaded",  # the least recently used: gone to make room
        "rerank": "loaded",
        "huge": "-",
        "broken": "-",
    }
    assert max(watch.samples) <= BUDGET_MB


def test_a_model_that_cannot_fit_is_a_503_naming_the_budget_in_each_protocol(server: Server):
    reply = rerank(server, "huge")
    assert reply.status_code == 503
    error = reply.json()["error"]
    assert error["code"] == "model_does_not_fit" and error["param"] == "model"
    assert f"the memory budget is {BUDGET_MB} MiB (--memory-budget-mb)" in error["message"]
    body = {"model": "huge", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    anthropic = httpx.post(f"{server.url}/v1/messages", json=body, timeout=30)
    assert anthropic.status_code == 503
    assert anthropic.json()["type"] == "error" and "budget" in anthropic.json()["error"]["message"]
    assert statuses(server)["huge"] == "unloaded"


def test_an_idle_model_unloads_after_its_ttl(server: Server):
    assert rerank(server).status_code == 200
    assert wait_until(lambda: statuses(server)["rerank"] == "unloaded", timeout_s=TTL_S + 15)
    assert statuses(server)[CHAT] == "loaded"  # no TTL: it stays


def test_load_and_unload_by_route_and_what_they_refuse(server: Server):
    url = server.url
    loaded = httpx.post(f"{url}/models/load", json={"model": "embed"}, timeout=120)
    assert loaded.status_code == 200 and loaded.json()["status"] == "loaded"
    unloaded = httpx.post(f"{url}/models/unload", json={"model": "embed"}, timeout=30)
    assert unloaded.status_code == 200 and unloaded.json()["model"] == "embed"
    assert wait_until(lambda: statuses(server)["embed"] == "unloaded", timeout_s=30)
    missing = httpx.post(f"{url}/models/load", json={"model": "nope"}, timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    empty = httpx.post(f"{url}/models/unload", json={}, timeout=30)
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "model"


def test_a_client_that_leaves_while_its_model_loads_frees_its_place(server: Server):
    assert statuses(server)["embed"] == "unloaded"
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{server.url}/v1/embeddings", json={"model": "embed", "input": "x"}, timeout=0.5
        )
    # Its admission slot is back before the model is (a load takes seconds) ...
    assert wait_until(lambda: server.stats()["gateway"]["in_flight"] == 0, timeout_s=10)
    assert statuses(server)["embed"] == "loading"
    # ... and the load goes on, for the next request.
    assert wait_until(lambda: statuses(server)["embed"] == "loaded", timeout_s=60)


def test_a_model_whose_worker_cannot_load_it_is_a_503_and_the_server_serves_on(server: Server):
    body = {"model": "broken", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
    assert reply.status_code == 503
    error = reply.json()["error"]
    assert error["param"] == "model" and "'broken' failed to load" in error["message"]
    assert "cannot load the model" in error["message"]
    assert statuses(server)["broken"] == "failed"
    chat = {**body, "model": CHAT}
    assert httpx.post(f"{server.url}/v1/chat/completions", json=chat, timeout=60).status_code == 200
