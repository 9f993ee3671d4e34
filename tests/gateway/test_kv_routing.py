"""pick_worker: when a worker tokenizes the prompt for exact routing, and when nothing is asked."""

import asyncio
from types import SimpleNamespace

from common.kv_events import AllBlocksCleared, BlockStored, KvEventBatch, prompt_block_hashes
from common.sampling_params import SamplingParams
from common.schemas import Register, Tokenize, Tokenized
from gateway import kv_routing
from gateway.kv_routing import pick_worker
from gateway.protocols.base import ChatRequest
from gateway.registry import WorkerRegistry
from gateway.router import ExactPrefix, RoundRobin

TOKENS = list(range(1000, 1065))
CHAT = ChatRequest(None, [{"role": "user", "content": "hi"}], SamplingParams())


class Hub:
    """What pick_worker uses of the WorkerHub: a channel per request, answered or not."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.sent: list[tuple[str, Tokenize]] = []
        self.open_ids: set[str] = set()

    def open(self, request_id, worker):
        self.open_ids.add(request_id)
        queue: asyncio.Queue = asyncio.Queue()
        self.channel = SimpleNamespace(
            request_id=request_id,
            get=lambda timeout: asyncio.wait_for(queue.get(), timeout),
            queue=queue,
        )
        return self.channel

    async def send(self, worker, message):
        self.sent.append((worker.worker_id, message))
        if self.answer:
            self.channel.queue.put_nowait(Tokenized(message.request_id, TOKENS))
        return True

    def close(self, channel):
        self.open_ids.discard(channel.request_id)


def fleet(publishing: bool):
    registry = WorkerRegistry()
    for worker_id in ("w0", "w1"):
        address = f"tcp://127.0.0.1:1{worker_id[1]}" if publishing else ""
        message = Register(worker_id, "i", "m", 512, 8, 100, 16, 1, "h", (), address, address)
        registry.register(worker_id.encode(), message, 0.0)
    policy = ExactPrefix()
    policy.index.track("w1", 16)
    hashes = tuple(prompt_block_hashes(TOKENS, 16))
    stored = BlockStored(hashes, None, tuple(TOKENS[:64]), 16)
    policy.index.apply("w1", 0, KvEventBatch(0.0, (AllBlocksCleared(), stored)))
    return registry, policy


def services(policy, hub):
    return SimpleNamespace(policy=policy, hub=hub)


async def test_a_worker_tokenizes_and_the_holder_of_the_pages_gets_the_request():
    registry, policy = fleet(publishing=True)
    hub = Hub(answer=True)
    chosen = await pick_worker(services(policy, hub), registry.all(), CHAT)  # type: ignore[arg-type]
    assert chosen.worker_id == "w1"
    ((asked, message),) = hub.sent
    assert asked == "w0"  # the least loaded tokenizes
    assert isinstance(message, Tokenize) and message.messages == CHAT.messages
    assert not hub.open_ids  # its channel is closed


async def test_no_answer_in_time_routes_on_the_text(monkeypatch):
    monkeypatch.setattr(kv_routing, "TOKENIZE_TIMEOUT_S", 0.05)
    registry, policy = fleet(publishing=True)
    hub = Hub(answer=False)
    chosen = await pick_worker(services(policy, hub), registry.all(), CHAT)  # type: ignore[arg-type]
    assert chosen.worker_id == "w0" and not hub.open_ids


async def test_nothing_is_asked_without_events_a_choice_or_the_exact_policy():
    hub = Hub(answer=True)
    silent, policy = fleet(publishing=False)
    await pick_worker(services(policy, hub), silent.all(), CHAT)  # type: ignore[arg-type]
    publishing, policy = fleet(publishing=True)
    await pick_worker(services(policy, hub), publishing.all()[:1], CHAT)  # type: ignore[arg-type]
    rr = services(RoundRobin(), hub)
    await pick_worker(rr, publishing.all(), CHAT)  # type: ignore[arg-type]
    assert hub.sent == []


async def test_token_id_prompts_need_no_round_trip():
    registry, policy = fleet(publishing=True)
    hub = Hub(answer=False)
    raw = ChatRequest(None, [], SamplingParams(), prompts=[TOKENS])
    chosen = await pick_worker(services(policy, hub), registry.all(), raw)  # type: ignore[arg-type]
    assert chosen.worker_id == "w1" and hub.sent == []
