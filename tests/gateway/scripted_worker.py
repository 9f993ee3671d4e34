"""A worker without a model, for in-process gateway tests: a real ZeroMQ DEALER on loopback
speaking the real wire messages (as worker/main.py does), answering each Submit from a script."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable

import zmq

from common.schemas import (
    Abort,
    Accepted,
    GatewayBeat,
    Heartbeat,
    Message,
    Register,
    Rejected,
    Submit,
)
from common.wire import decode, encode

# What the worker answers to a Submit: Accepted or Rejected first, then its events.
Script = Callable[[Submit], list[Message]]
BEAT_S = 0.05  # heartbeat interval; the tests' gateway times a worker out after 1 s
POLL_MS = 10


class ScriptedWorker:
    """Registers, beats, answers Submits from `script`, and records what the gateway sent.

    `falls_silent`: after its first answer it sends nothing more, heartbeats included, as a
    frozen worker would. Everything runs on one thread that owns the socket; `stop` joins it
    and closes the socket and its context.
    """

    def __init__(
        self,
        gateway: str,
        script: Script,
        worker_id: str = "scripted-0",
        model: str = "scripted",
        falls_silent: bool = False,
        aliases: tuple[str, ...] = (),
    ) -> None:
        self.gateway = gateway
        self.script = script
        self.worker_id = worker_id
        self.model = model
        self.aliases = aliases
        self.falls_silent = falls_silent
        self.incarnation = uuid.uuid4().hex
        self.submits: list[Submit] = []
        self.aborts: list[str] = []
        self.answered = 0  # Submits answered in full (every scripted message sent)
        self._silent = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"scripted-{worker_id}")

    def start(self) -> ScriptedWorker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        assert not self._thread.is_alive(), "the scripted worker did not stop"

    def _run(self) -> None:
        context = zmq.Context()
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IDENTITY, self.worker_id.encode())
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(self.gateway)
        try:
            dealer.send(encode(self._register()))
            next_beat = 0.0
            while not self._stopping.is_set():
                now = time.monotonic()
                if not self._silent and now >= next_beat:
                    dealer.send(encode(self._heartbeat()))
                    next_beat = now + BEAT_S
                if dealer.poll(POLL_MS):
                    self._receive(dealer)
        finally:
            dealer.close()
            context.term()

    def _receive(self, dealer: zmq.Socket[bytes]) -> None:
        while True:
            try:
                message = decode(dealer.recv(zmq.NOBLOCK))
            except zmq.Again:
                return
            if isinstance(message, GatewayBeat) and not message.registered:
                dealer.send(encode(self._register()))  # the gateway does not know us yet
            elif isinstance(message, Submit):
                self.submits.append(message)
                if not self._silent:
                    self._answer(dealer, message)
            elif isinstance(message, Abort):
                self.aborts.append(message.request_id)

    def _answer(self, dealer: zmq.Socket[bytes], submit: Submit) -> None:
        """The first answer alone, then the rest as one multipart (as a worker sends a step's
        events)."""
        replies = self.script(submit)
        first, events = replies[0], replies[1:]
        assert isinstance(first, (Accepted, Rejected)), "a script answers Submit first"
        dealer.send(encode(first))
        if events:
            dealer.send_multipart([encode(event) for event in events])
        self.answered += 1
        self._silent = self.falls_silent

    def _register(self) -> Register:
        return Register(
            worker_id=self.worker_id,
            incarnation=self.incarnation,
            model=self.model,
            max_context=4096,
            max_seqs=8,
            kv_pages=64,
            page_size=16,
            pid=os.getpid(),
            host="scripted",
            aliases=self.aliases,
        )

    def _heartbeat(self) -> Heartbeat:
        return Heartbeat(
            worker_id=self.worker_id,
            incarnation=self.incarnation,
            waiting=0,
            running=0,
            kv_pages_free=64,
            kv_pages_total=64,
            prefix_cache_hit_tokens=0,
        )
