"""Per-item outcomes become summary events (issue 30 row 3): a flood of labels for unknown ids, of reused
ids or of gaps in ``seq`` costs a device at most one event of each kind a second, each with the count since
the last, while its counters count every item; one message of many misses is one event."""

from __future__ import annotations

import json
from pathlib import Path

from support.sessions import gateway, running

from edgedrift_edge.session.device_session import DeviceSession, SessionConfig
from edgedrift_edge.session.event_summary import EventSummaries


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_first_item_goes_out_at_once_and_the_rest_once_per_interval() -> None:
    clock = Clock()
    summaries = EventSummaries(clock, items_per_event=3, interval_s=1.0)
    summaries.add("label_miss", "gone", item=1)
    [first] = summaries.due()
    assert (first["type"], first["count"], first["id"], first["ids"]) == ("label_miss", 1, 1, [1])
    for i in range(2, 1002):
        summaries.add("label_miss", "gone", item=i)
        assert summaries.due() == []
    assert summaries.pending
    clock.now = 1.0
    [second] = summaries.due()
    assert second["count"] == 1000 and second["ids"] == [2, 3, 4]
    assert not summaries.pending and summaries.due() == []


def test_kinds_are_summarised_apart() -> None:
    clock = Clock()
    summaries = EventSummaries(clock, items_per_event=5)
    summaries.add("label_miss", "gone", item="a")
    summaries.add("outlier", "far", item="b")
    assert sorted((e["type"], e["count"]) for e in summaries.due()) == [("label_miss", 1), ("outlier", 1)]
    assert not summaries.pending
    summaries.add("outlier", "far", item="c")  # held by its interval, while the other kind's is reported
    clock.now = 0.5
    summaries.add("label_miss", "gone", item="d")
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


def test_ranges_sums_and_latest_values_add_up_and_a_stop_flushes_them() -> None:
    clock = Clock()
    summaries = EventSummaries(clock, items_per_event=2)
    summaries.add("dropped", "gone", count=3, item=(5, 7), latest={"total": 3})
    [first] = summaries.due()
    assert (first["count"], first["first_seq"], first["last_seq"], first["ranges"]) == (3, 5, 7, [[5, 7]])
    for start in (10, 20, 30):  # within the interval: held, then one event spanning them
        summaries.add("dropped", "gone", count=2, item=(start, start + 1), latest={"total": start})
    summaries.add("overloaded", "full", count=4, sums={"messages": 1, "samples": 4, "labels": 0})
    summaries.add("overloaded", "full", count=1, sums={"messages": 1, "samples": 0, "labels": 1})
    [refused] = summaries.due()  # the first overloaded event goes out at once, without ids
    assert refused == {
        "type": "overloaded", "count": 5, "messages": 2, "samples": 4, "labels": 1, "reason": "full"
    }  # fmt: skip
    assert summaries.pending and summaries.due() == []
    [dropped] = summaries.due(flush=True)
    assert (dropped["count"], dropped["total"], dropped["first_seq"], dropped["last_seq"]) == (6, 30, 10, 31)
    assert dropped["ranges"] == [[10, 11], [20, 21]] and not summaries.pending


def test_floods_of_reused_ids_and_of_skipping_seq_cost_one_event_a_second() -> None:
    """A sensor whose id is always 7, and a publisher whose ``seq`` skips one at every message: 2,000
    messages over 20 s each, an event and a publish per message before; now about one a second."""
    clock = Clock()
    config = SessionConfig(device_id="dev-f", n_features=2, warmup_samples=1000, seq_grace_s=5.0)
    s = DeviceSession(config, lambda _request: None, clock)
    events = []
    for i in range(2000):
        clock.now += 0.01
        body = {"id": 7, "x": [0.001 * i, 2.0]} if i < 1000 else {"id": i, "x": [0.1, 1.0], "seq": 2 * i}
        events += s.handle("samples", json.dumps(body).encode()).events
    clock.now += 6.0
    events += s.due_events()
    reused = [e for e in events if e["type"] == "id_reused"]
    dropped = [e for e in events if e["type"] == "dropped"]
    assert s.counters.id_reused == 999 == sum(e["count"] for e in reused) and len(reused) <= 12
    assert s.counters.broker_dropped == 999 == sum(e["count"] for e in dropped) and len(dropped) <= 12
    assert reused[0]["id"] == 7 and dropped[-1]["total"] == 999 and len(dropped[-1]["ranges"]) == 5
