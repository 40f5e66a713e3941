"""Summary events for outcomes that come one item at a time, so that no input of one device costs an MQTT
publish per item (issue 30 row 3): labels whose sample is not among the recent ones (``label_miss``),
late-labeled samples outside the guard's range (``outlier``), ids reused with new content
(``id_reused``), the ``seq`` ranges the broker dropped (``dropped``, from
:class:`~edgedrift_edge.session.seq.SeqCheck`) and the items a gateway refused past a device's share
(``overloaded``).

A flood of such items (200,000 labels for unknown ids, a sensor whose ids restart at every sample, a
publisher whose ``seq`` skips) used to cost one event and one MQTT publish per item. Here each kind yields
at most one event per interval per device: the count since its last event, the sums and latest values
its items carry, and the first few items (ids, or ``seq`` ranges); the counters in the status and the
heartbeat still count every item. Pure: the clock is injected, so a session and its tests stay free of
time and I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from edgedrift_edge.session.ledger import Event

#: Seconds between two summary events of one kind of one device.
SUMMARY_INTERVAL_S = 1.0
#: ``item`` left out: the kind lists nothing (``overloaded``); an id itself may be None (a sample without).
NO_ITEM: Any = object()


@dataclass
class _Pending:
    count: int = 0
    items: list[Any] = field(default_factory=list)
    last_item: Any = None
    sums: dict[str, int] = field(default_factory=dict)
    latest: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    last_emitted: float = -math.inf


def _listed(p: _Pending) -> dict[str, Any]:
    """The event's fields for its listed items: ``seq`` ranges (``ranges``, with ``first_seq`` and
    ``last_seq`` spanning them; ``dropped``) or ids (``ids``, the first as ``id``)."""
    if not p.items:
        return {}
    if isinstance(p.items[0], tuple):
        ranges = [list(r) for r in p.items]
        return {"first_seq": ranges[0][0], "last_seq": p.last_item[1], "ranges": ranges}
    return {"id": p.items[0], "ids": p.items}


class EventSummaries:
    """Counts per kind, released as one event per kind at most every ``interval_s`` seconds."""

    def __init__(
        self, clock: Callable[[], float], items_per_event: int, interval_s: float = SUMMARY_INTERVAL_S
    ) -> None:
        self.clock = clock
        self.items_per_event = items_per_event
        self.interval_s = interval_s
        self._kinds: dict[str, _Pending] = {}
        self._held = 0  # kinds holding items not yet reported

    def add(
        self,
        kind: str,
        reason: str,
        *,
        count: int = 1,
        item: Any = NO_ITEM,
        sums: Mapping[str, int] | None = None,
        latest: Mapping[str, Any] | None = None,
    ) -> None:
        """``count`` items of ``kind``: ``item`` (an id, or a ``(first, last)`` range of ``seq``) listed
        while the event has room, ``sums`` added up over the interval, ``latest`` values (a running
        total) replaced."""
        pending = self._kinds.setdefault(kind, _Pending())
        if not pending.count:
            self._held += 1
        pending.count += count
        pending.reason = reason
        if item is not NO_ITEM:
            pending.last_item = item
            if len(pending.items) < self.items_per_event:
                pending.items.append(item)
        for name, value in (sums or {}).items():
            pending.sums[name] = pending.sums.get(name, 0) + value
        pending.latest.update(latest or {})

    @property
    def pending(self) -> bool:
        """Whether some kind holds items not yet reported."""
        return self._held > 0

    def due(self, flush: bool = False) -> list[Event]:
        """The events whose interval has passed (the first of a kind goes out at once; ``flush``: every
        one, at a stop)."""
        if not self._held:
            return []
        now = self.clock()
        events: list[Event] = []
        for kind, p in self._kinds.items():
            if p.count and (flush or now - p.last_emitted >= self.interval_s):
                event = {"type": kind, "count": p.count, **p.sums, **p.latest, **_listed(p)}
                events.append({**event, "reason": p.reason})
                self._held -= 1
                self._kinds[kind] = _Pending(last_emitted=now)
        return events
