"""The KV disk tier through the whole stack: `astrai serve` started again on one folder finds
what the first run computed, reports it as cached tokens in each protocol, and a damaged
page file is computed again, never served."""

from __future__ import annotations

import re
import resource
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conftest import TINY_NAME
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow  # three `astrai serve` starts

PAGE_SIZE = 16
SYSTEM = " ".join(f"Rule {i}: answer the question about item {i % 13} briefly." for i in range(60))
QUESTION = [{"role": "user", "content": "Which rule comes first?"}]


def serve(model_dir: Path, folder: Path, *more: str, **settings: Any) -> Server:
    args = ("--model", str(model_dir), "--dtype", "float32", "--kv-cache-mb", "64", *more)
    return Server("serve", *args, "--kv-disk-dir", str(folder), **settings).wait_ready()


def ask_openai(server: Server) -> tuple[list[float], int, int]:
    """(each token's logprob, prompt tokens, cached tokens) of a greedy answer: rows read
    back wrong would move the logprobs even where a random model's text stays the same."""
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    answer = client.chat.completions.create(
        model=TINY_NAME,
        messages=[{"role": "system", "content": SYSTEM}, *QUESTION],  # type: ignore[list-item]
        max_tokens=8,
        temperature=0,
        logprobs=True,
    )
    usage = answer.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    cached = usage.prompt_tokens_details.cached_tokens or 0
    content = answer.choices[0].logprobs.content if answer.choices[0].logprobs else None
    assert content
    return [round(token.logprob, 3) for token in content], usage.prompt_tokens, cached


def worker_stats(server: Server) -> dict[str, float]:
    [worker] = server.stats()["workers"]
    return worker


def test_a_restarted_server_reads_the_prompt_back_from_its_disk_tier(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "kv"
    first = serve(tiny_model_dir, folder)
    try:
        logprobs, prompt_tokens, cached = ask_openai(first)
        assert cached == 0
    finally:
        first.stop()
    full_pages = (prompt_tokens - 1) // PAGE_SIZE  # the last token is always computed
    [model_folder] = [p for p in folder.iterdir() if p.is_dir()]
    assert len(list(model_folder.glob("*.kv"))) == prompt_tokens // PAGE_SIZE

    second = serve(tiny_model_dir, folder)
    try:
        client = anthropic.Anthropic(base_url=second.url, api_key="unused", max_retries=0)
        message = client.messages.create(
            model=TINY_NAME,
            system=SYSTEM,
            messages=QUESTION,  # type: ignore[arg-type]
            max_tokens=8,
            extra_body={"temperature": 0},
        )
        # Read back from disk, not computed: nothing of it is written to the cache again.
        assert message.usage.cache_read_input_tokens == full_pages * PAGE_SIZE
        assert message.usage.cache_creation_input_tokens == 0
        assert message.usage.input_tokens == prompt_tokens - full_pages * PAGE_SIZE
        stats = worker_stats(second)
        assert stats["prefix_cache_disk_hit_tokens"] == full_pages * PAGE_SIZE
        assert stats["kv_disk_pages_written"] == 0  # every page was there already
        metrics = httpx.get(f"{second.url}/metrics", timeout=10).text
        disk_hits = f"{full_pages * PAGE_SIZE}.0"
        hits = r'vllm:prefix_cache_hits_total{[^}]*tier="disk"[^}]*} ' + disk_hits
        assert re.search(hits, metrics), metrics
        # The same greedy answer as computed, now from rows read back (and, past them, the
        # rows the Anthropic request left in memory).
        again, _, cached = ask_openai(second)
        assert again == logprobs and cached >= full_pages * PAGE_SIZE
    finally:
        second.stop()

    # Damaged pages (a disk error, a half-copied folder): refused, computed, written again.
    pages = list(model_folder.glob("*.kv"))
    whole = pages[0].stat().st_size
    for page in pages:
        page.write_bytes(page.read_bytes()[:-100])
    third = serve(tiny_model_dir, folder)
    try:
        assert ask_openai(third) == (logprobs, prompt_tokens, 0)
        stats = worker_stats(third)
        assert stats["kv_disk_read_failures"] == 1  # the first page: nothing after it is read
        # The refused file was deleted and written again; each other damaged one is refused
        # (and written again) once a read reaches it.
        assert stats["kv_disk_pages_written"] == 1
        assert sum(page.stat().st_size == whole for page in pages) == 1
    finally:
        third.stop()


# The tiny model's page file: 2 layers x 16 rows x 2 kv heads x 16 dims x 4 bytes, k and v,
# and a header. Smaller than what the server's other files reach (its log, identity.txt).
FILE_SIZE_LIMIT = 6000


def limit_file_size() -> None:
    """A disk that refuses writes past a size: write() fails with EFBIG, as a full one fails
    with ENOSPC (Python ignores SIGXFSZ, which would otherwise end the process)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


def test_a_disk_that_refuses_writes_turns_the_tier_off_and_serving_goes_on(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "kv"
    # No decode-cost table to write either: the probe's file is the server's one larger write.
    server = serve(tiny_model_dir, folder, "--speculative-tokens", "0", before_exec=limit_file_size)
    try:
        logprobs, prompt_tokens, cached = ask_openai(server)
        assert cached == 0
        again, _, cached = ask_openai(server)  # the memory tier still serves the prefix
        assert again == logprobs and cached >= (prompt_tokens - 1) // PAGE_SIZE * PAGE_SIZE
        stats = worker_stats(server)
        assert stats["kv_disk_pages_written"] == 0 and stats["kv_disk_bytes"] == 0
        assert "KV disk tier off: writing" in server.log.tail()
    finally:
        server.stop()
    assert not list(folder.rglob("*.kv")) and not list(folder.rglob("*.tmp"))
