"""Per-item outcomes become summary events (issue 30 row 3): a flood of labels for unknown ids costs a
device at most one ``label_miss`` event a second, each with the count since the last, while its counters
count every label; one message of many misses is one event."""

from __future__ import annotations

import json
from pathlib import Path

from support.sessions import gateway, running

from edgedrift_edge.session.event_summary import EventSummaries


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_first_item_goes_out_at_once_and_the_rest_once_per_interval() -> None:
    clock = Clock()
    summaries = EventSummaries(clock, ids_per_event=3, interval_s=1.0)
    summaries.add("label_miss", 1, "gone")
    [first] = summaries.due()
    assert (first["type"], first["count"], first["id"], first["ids"]) == ("label_miss", 1, 1, [1])
    for i in range(2, 1002):
        summaries.add("label_miss", i, "gone")
        assert summaries.due() == []
    assert summaries.pending
    clock.now = 1.0
    [second] = summaries.due()
    assert second["count"] == 1000 and second["ids"] == [2, 3, 4]
    assert not summaries.pending and summaries.due() == []


def test_kinds_are_summarised_apart() -> None:
    clock = Clock()
    summaries = EventSummaries(clock, ids_per_event=5)
    summaries.add("label_miss", "a", "gone")
    summaries.add("outlier", "b", "far")
    assert sorted((e["type"], e["count"]) for e in summaries.due()) == [("label_miss", 1), ("outlier", 1)]
    assert not summaries.pending
    summaries.add("outlier", "c", "far")  # held by its interval, while the other kind's is reported
    clock.now = 0.5
    summaries.add("label_miss", "d", "gone")
    assert summaries.pending and summaries.due() == []
    clock.now = 1.0
    assert [(e["type"], e["count"]) for e in summaries.due()] == [("label_miss", 1), ("outlier", 1)]
    assert not summaries.pending


def test_a_flood_of_unknown_labels_costs_a_session_one_event_per_second(tmp_path: Path) -> None:
    s, _ = running(gateway(tmp_path))
    clock = Clock()
    s.summaries.clock = clock
    events = []
    for i in range(5000):
        events += s.handle("labels", json.dumps({"id": 10**6 + i, "y": 1.0}).encode()).events
    batch = {"labels": [{"id": 2 * 10**6 + i, "y": -1.0} for i in range(200)]}
    clock.now = 1.0
    events += s.handle("labels", json.dumps(batch).encode()).events
    misses = [e for e in events if e["type"] == "label_miss"]
    assert [e["count"] for e in misses] == [1, 5199]
    assert s.counters.label_misses == 5200 == sum(e["count"] for e in misses)
    assert len(misses[1]["ids"]) == 5
