"""Exact KV routing with real processes: two workers publish their KV events, two gateways
follow them, and a prompt's next requests go where its pages are through either gateway; a
plain SUB socket reads the same events."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import msgpack
import pytest
import zmq

from bench.server import Server, WorkerProcess, wait_until
from common.kv_events import prompt_block_hashes

pytestmark = pytest.mark.slow
MODEL = "SmolLM2-135M-Instruct"
PAGE_SIZE = 16  # the workers' default
# An odd number of prompts: round robin would send every second request to the other worker.
SUBJECTS = ("tides", "volcanoes", "glaciers", "deserts", "rivers")


def system_prompt(subject: str) -> str:
    fact = "change slowly and reward patient study."
    facts = " ".join(f"Fact {i}: {subject} {fact}" for i in range(8))
    return f"You are the {subject} desk's assistant. {facts}"


def messages(subject: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system_prompt(subject)},
        {"role": "user", "content": "Say hello."},
    ]


def chat(url: str, subject: str) -> dict:
    body = {"model": MODEL, "messages": messages(subject), "max_tokens": 4}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def gateways() -> Iterator[list[Server]]:
    """Two gateways routing `exact`; two workers on the default model dialing both."""
    both = [Server("gateway", "--routing", "exact") for _ in range(2)]
    first, second = (gateway.worker_bind for gateway in both)
    workers = [
        WorkerProcess(first, "--gateway", second, "--kv-cache-mb", "64", worker_id=f"w{i}")
        for i in range(2)
    ]
    try:
        yield [gateway.wait_ready(workers=2) for gateway in both]
    finally:
        for server in [*workers, *both]:
            server.stop()
        assert not any(gateway.group_alive() for gateway in both)


def kv_views(gateway: Server) -> dict:
    return gateway.stats()["gateway"]["kv_events"]


def test_a_prompts_next_requests_land_where_its_pages_are(gateways: list[Server]) -> None:
    cluster, other = gateways
    assert all(wait_until(lambda g=g: len(kv_views(g)) == 2, 10) for g in gateways)
    # Together, the first requests spread over both workers (in-flight counts differ).
    with ThreadPoolExecutor(len(SUBJECTS)) as pool:
        list(pool.map(lambda subject: chat(cluster.url, subject), SUBJECTS))

    def served() -> list[int]:
        return [w.get("total_tasks", 0) for w in cluster.stats()["workers"]]

    assert wait_until(lambda: sum(served()) == len(SUBJECTS), 10), served()
    assert all(n > 0 for n in served()), served()
    # The other gateway sent none of them, and knows from the events where each one is.
    for subject in SUBJECTS:
        for gateway in (other, cluster):
            usage = chat(gateway.url, subject)["usage"]
            full_pages = (usage["prompt_tokens"] - 1) // PAGE_SIZE * PAGE_SIZE
            cached = usage["prompt_tokens_details"]["cached_tokens"]
            assert cached >= full_pages, (gateway.url, subject, usage)
    bad = ("kv_framing", "kv_malformed", "kv_foreign", "kv_inconsistent", "kv_replay_timeout")
    for gateway in gateways:
        views = kv_views(gateway)
        assert all(view["in_step"] and view["pages"] > 0 for view in views.values()), views
        dropped = gateway.stats()["dropped_frames"]
        assert not any(dropped.get(reason) for reason in bad), dropped


def test_an_outside_subscriber_reads_well_formed_block_stored_events(
    gateways: list[Server],
) -> None:
    cluster = gateways[0]
    workers = {w["worker_id"]: w for w in cluster.stats()["workers"]}
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    for worker in workers.values():
        sub.connect(worker["kv_events"])
    try:
        time.sleep(0.5)  # the subscriptions reach both PUB sockets
        subject = "lighthouses"
        chat(cluster.url, subject)
        tokens = httpx.post(
            f"{cluster.url}/tokenize", json={"model": MODEL, "messages": messages(subject)}
        ).json()["tokens"]
        hashes = prompt_block_hashes(tokens, PAGE_SIZE)
        stored: list[list] = []
        on_disk: list[list] = []  # the same pages, once their files are written
        deadline = time.monotonic() + 10
        while not (stored and on_disk) and time.monotonic() < deadline:
            if not sub.poll(1000):
                continue
            topic, seq, payload = sub.recv_multipart()
            assert topic.decode() in workers and len(seq) == 8
            ts, events = msgpack.unpackb(payload)
            assert isinstance(ts, float) and time.time() - 60 < ts <= time.time()
            for event in events:
                if event[0] == "BlockStored" and event[1][0] in hashes:
                    (on_disk if event[-1] == "DISK" else stored).append(event)
        stored = [e for e in stored if e[1][0] == hashes[0]]
        assert stored, "no BlockStored for the prompt's first page"
        assert on_disk, "no BlockStored of medium DISK for the prompt's pages"
        for _, (page_hash,), parent, page_tokens, _, _, _ in on_disk:
            i = hashes.index(page_hash)
            assert parent == (hashes[i - 1] if i else None)
            assert page_tokens == tokens[i * PAGE_SIZE : (i + 1) * PAGE_SIZE]
        _, block_hashes, parent, token_ids, block_size, lora_id, medium = stored[0]
        assert block_hashes == hashes[: len(block_hashes)] and len(block_hashes) > 1
        assert parent is None and token_ids == tokens[: len(block_hashes) * PAGE_SIZE]
        assert (block_size, lora_id) == (PAGE_SIZE, None) and medium in ("CPU", "GPU")
        # The replay socket answers vLLM's request: every batch since 0, then -1.
        dealer = context.socket(zmq.DEALER)
        dealer.connect(workers[topic.decode()]["kv_replay"])
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        numbers = []
        while True:
            assert dealer.poll(5000), "the replay socket did not answer"
            _, seq, payload = dealer.recv_multipart()
            numbers.append(int.from_bytes(seq, "big", signed=True))
            if numbers[-1] == -1:
                break
            msgpack.unpackb(payload)
        dealer.close()
        assert numbers[0] == 0 and numbers[:-1] == list(range(len(numbers) - 1))
    finally:
        sub.close()
        context.destroy(linger=0)
