"""Summary events for outcomes that come one item at a time: labels whose sample is not among the
recent ones (``label_miss``) and late-labeled samples outside the guard's range (``outlier``).

A flood of such items (200,000 labels for unknown ids) used to cost one event and one MQTT publish per
item. Here each kind yields at most one event per interval per device, carrying the count since its last
event and the first few ids; the counters in the status and the heartbeat still count every item. Pure:
the clock is injected, so a session and its tests stay free of time and I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from edgedrift_edge.session.ledger import Event
from edgedrift_edge.session.messages import SampleId

#: Seconds between two summary events of one kind of one device.
SUMMARY_INTERVAL_S = 1.0


@dataclass
class _Pending:
    count: int = 0
    ids: list[SampleId | None] = field(default_factory=list)
    reason: str = ""
    last_emitted: float = -math.inf


class EventSummaries:
    """Counts per kind, released as one event per kind at most every ``interval_s`` seconds."""

    def __init__(
        self, clock: Callable[[], float], ids_per_event: int, interval_s: float = SUMMARY_INTERVAL_S
    ) -> None:
        self.clock = clock
        self.ids_per_event = ids_per_event
        self.interval_s = interval_s
        self._kinds: dict[str, _Pending] = {}
        self._held = 0  # items of every kind not yet reported

    def add(self, kind: str, sid: SampleId | None, reason: str) -> None:
        """One item of ``kind`` (its id, if any, listed while the event has room)."""
        pending = self._kinds.setdefault(kind, _Pending())
        pending.count += 1
        self._held += 1
        pending.reason = reason
        if len(pending.ids) < self.ids_per_event:
            pending.ids.append(sid)

    @property
    def pending(self) -> bool:
        """Whether some kind holds items not yet reported."""
        return self._held > 0

    def due(self) -> list[Event]:
        """The events whose interval has passed (the first of a kind goes out at once)."""
        now = self.clock()
        events: list[Event] = []
        for kind, p in self._kinds.items():
            if p.count and now - p.last_emitted >= self.interval_s:
                event = {"type": kind, "count": p.count, "id": p.ids[0], "ids": p.ids, "reason": p.reason}
                events.append(event)
                self._held -= p.count
                self._kinds[kind] = _Pending(last_emitted=now)
        return events
