"""The launcher's end of model control: the gateway asks for the catalog, a load, an unload
or the processes' status; each answer is a map with `ok` (and `error` when not)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import zmq

from common.model_control import Catalog, catalog_to_wire, pack, unpack
from launcher.model_workers import ModelWorkers

log = logging.getLogger(__name__)


class ModelControlServer:
    """A ROUTER on a free loopback port; `answer_pending` serves what arrived, never blocks."""

    def __init__(self, catalog: Catalog, workers: Mapping[str, ModelWorkers]) -> None:
        self.catalog, self.workers = catalog, workers
        self._context = zmq.Context()
        self.socket = self._context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"

    def answer_pending(self) -> None:
        while True:
            try:
                identity, frame = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:  # not two frames: not our gateway
                continue
            try:
                message = unpack(frame)
                reply = self.answer(message)
                reply["id"] = message.get("id")
            except (ValueError, TypeError) as exc:
                reply = {"ok": False, "error": f"bad model-control message: {exc}"}
            self.socket.send_multipart([identity, pack(reply)])

    def answer(self, message: Mapping[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        if op == "catalog":
            return {"ok": True, "catalog": catalog_to_wire(self.catalog)}
        if op == "status":
            status = {name: dataclasses.asdict(w.status()) for name, w in self.workers.items()}
            return {"ok": True, "models": status}
        model = self.workers.get(str(message.get("model")))
        if model is None:
            return {"ok": False, "error": f"no model {message.get('model')!r} in the catalog"}
        if op == "load":
            log.info("loading model %s", model.name)
            model.start()
            return {"ok": True}
        if op == "unload":
            log.info("unloading model %s", model.name)
            model.stop()
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def close(self) -> None:
        self.socket.close()
        self._context.term()
