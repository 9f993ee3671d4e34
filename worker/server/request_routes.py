"""RequestRoutes: which gateway link each running request came from, until its last choice ends."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class _Route:
    link_id: int
    choices_left: int


class RequestRoutes:
    """A request belongs to the gateway that sent it: only that gateway may abort it, and
    when that gateway is lost only its requests are aborted.

    Routes are added on the I/O thread (Submit) and end on the engine thread (the last
    choice's finish event), hence the lock. A request id is taken by one gateway at a time.
    """

    def __init__(self) -> None:
        self._routes: dict[str, _Route] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._routes)

    def add(self, request_id: str, link_id: int, num_choices: int) -> bool:
        """False when the id is running already (from any gateway): nothing changes."""
        with self._lock:
            if request_id in self._routes:
                return False
            self._routes[request_id] = _Route(link_id, num_choices)
            return True

    def discard(self, request_id: str, link_id: int) -> None:
        """The request was refused: it never ran."""
        with self._lock:
            route = self._routes.get(request_id)
            if route is not None and route.link_id == link_id:
                del self._routes[request_id]

    def choice_ended(self, request_id: str, link_id: int) -> None:
        """One of the request's choices ended; the route ends with its last one."""
        with self._lock:
            route = self._routes.get(request_id)
            if route is None or route.link_id != link_id:
                return
            route.choices_left -= 1
            if route.choices_left <= 0:
                del self._routes[request_id]

    def is_from(self, request_id: str, link_id: int) -> bool:
        route = self._routes.get(request_id)
        return route is not None and route.link_id == link_id

    def take_all_of(self, link_id: int) -> list[str]:
        """The ids of every request from one link, which stop being routed."""
        with self._lock:
            taken = [rid for rid, route in self._routes.items() if route.link_id == link_id]
            for request_id in taken:
                del self._routes[request_id]
        return taken
