"""RequestStatus: where one choice stands in the scheduler, and the moves it may make."""

from __future__ import annotations

from enum import Enum


class RequestStatus(Enum):
    """One choice's state; `Sequence.move_to` is the only place it changes.

    Invariant: a WAITING or PREEMPTED sequence holds no pages and sits in the scheduler's
    waiting queue; a PREFILLING or DECODING one holds the pages of its computed tokens and
    of what it computes next, and sits in its running list; a FINISHED one holds nothing,
    has its finish reason set and is dropped from either at the next schedule.

        WAITING ──admit──▶ PREFILLING ──first token──▶ DECODING
           │                 ▲    │                      │
           │           admit │    └──────preempt───────┐ │ preempt
           │                 │                         ▼ ▼
           │               PREEMPTED ◀─────────────────┘
           ▼                  │
        FINISHED ◀──abort─────┘   (and from PREFILLING or DECODING: a stop, the length,
                                   an abort or an error)
    """

    WAITING = "waiting"  # arrived, never admitted
    PREFILLING = "prefilling"  # admitted: computing its prompt (or recomputing after preemption)
    DECODING = "decoding"  # admitted: feeding one sampled token a step (and drafts)
    PREEMPTED = "preempted"  # gave its pages back for an older sequence; waits to recompute
    FINISHED = "finished"  # ended; Sequence.finish_reason says why

    @property
    def is_running(self) -> bool:
        return self in _RUNNING


_RUNNING = frozenset({RequestStatus.PREFILLING, RequestStatus.DECODING})

TRANSITIONS: dict[RequestStatus, frozenset[RequestStatus]] = {
    RequestStatus.WAITING: frozenset({RequestStatus.PREFILLING, RequestStatus.FINISHED}),
    RequestStatus.PREFILLING: frozenset(
        {RequestStatus.DECODING, RequestStatus.PREEMPTED, RequestStatus.FINISHED}
    ),
    RequestStatus.DECODING: frozenset({RequestStatus.PREEMPTED, RequestStatus.FINISHED}),
    RequestStatus.PREEMPTED: frozenset({RequestStatus.PREFILLING, RequestStatus.FINISHED}),
    RequestStatus.FINISHED: frozenset(),
}
