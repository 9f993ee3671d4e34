"""The gateway's end of model control: one request at a time to the launcher that started it
(`astrai serve`), each answered within a few seconds or counted as failed."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import zmq
import zmq.asyncio

from common.model_control import (
    Catalog,
    ModelProcesses,
    catalog_from_wire,
    pack,
    processes_from_wire,
    unpack,
)

ANSWER_TIMEOUT_S = 5.0


class ModelControlError(Exception):
    """The launcher refused, or did not answer in time."""


class ModelControlClient:
    def __init__(self, address: str) -> None:
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(address)
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """The launcher's answer to `op`; ModelControlError if it refused or is silent."""
        async with self._lock:
            request_id = next(self._ids)
            await self._socket.send(pack({"id": request_id, "op": op, **fields}))
            deadline = asyncio.get_running_loop().time() + ANSWER_TIMEOUT_S
            while True:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0 or not await self._socket.poll(left * 1000):
                    raise ModelControlError(f"astrai serve did not answer {op!r} in time")
                reply = unpack(await self._socket.recv())
                if reply.get("id") == request_id:  # else a late answer to a timed-out one
                    break
        if not reply.get("ok"):
            raise ModelControlError(str(reply.get("error", "refused")))
        return reply

    async def catalog(self) -> Catalog:
        return catalog_from_wire((await self.request("catalog"))["catalog"])

    async def status(self) -> dict[str, ModelProcesses]:
        return processes_from_wire((await self.request("status"))["models"])

    async def load(self, model: str) -> None:
        await self.request("load", model=model)

    async def unload(self, model: str) -> None:
        await self.request("unload", model=model)

    def close(self) -> None:
        self._socket.close()
        self._context.term()
