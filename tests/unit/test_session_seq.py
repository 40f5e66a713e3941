"""Issue 30 row 2: samples the broker dropped are told from the gaps in the publisher's ``seq``, counted
in ``broker_dropped`` once the gap's grace has passed (reported in ``dropped`` summary events), and never
confused with what the agent accounted for itself (rejected whole), with redeliveries, with a restarted
count or with samples a broker delivered out of order; the expected ``seq`` and the open gaps survive a
checkpoint."""

from __future__ import annotations

import json
from typing import Any

from edgedrift_edge.session.device_session import DeviceSession, SessionConfig


def no_cloud(_request: Any) -> None:
    return None


GRACE = 30.0


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fresh(clock: Clock | None = None) -> DeviceSession:
    config = SessionConfig(device_id="dev-s", n_features=2, warmup_samples=1000, seq_grace_s=GRACE)
    return DeviceSession(config, no_cloud, clock or Clock())


def after_grace(s: DeviceSession) -> list[dict[str, Any]]:
    """The ``dropped`` events the agent's housekeeping gets once every open gap's grace has passed."""
    assert isinstance(s.clock, Clock)
    s.clock.now += GRACE
    return drops(s.due_events())


def single(i: int, seq: int | None = None) -> bytes:
    body: dict[str, Any] = {"id": i, "x": [0.1 * i, 1.0]}
    if seq is not None:
        body["seq"] = seq
    return json.dumps(body).encode()


def batch(first: int, n: int, seq: int) -> bytes:
    items = [{"id": i, "x": [0.1 * i, 1.0]} for i in range(first, first + n)]
    return json.dumps({"samples": items, "seq": seq}).encode()


def drops(out_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in out_events if e["type"] == "dropped"]


def test_a_gap_in_seq_counts_the_missing_samples_once() -> None:
    s = fresh()
    assert not drops(s.handle("samples", single(0, 0)).events)
    assert not drops(s.handle("samples", batch(1, 4, 1)).events)  # seq 1..4
    assert not drops(s.handle("samples", single(9, 9)).events)  # 5..8 not here (yet)
    assert s.counters.broker_dropped == 0 and s.seq.gaps == [(5, 9, 0.0)] and s.events_due
    s.clock.now = GRACE - 0.1  # type: ignore[attr-defined]
    assert not drops(s.due_events())
    [event] = after_grace(s)
    assert (event["count"], event["first_seq"], event["last_seq"]) == (4, 5, 8)
    assert s.counters.broker_dropped == 4 and s.counters.predictions == 6 and not s.events_due
    assert not drops(s.handle("samples", single(9, 9)).events)  # a redelivery moves nothing
    assert not drops(s.handle("samples", single(100, 0)).events)  # a publisher that restarted its count
    assert not after_grace(s) and s.counters.broker_dropped == 4


def test_a_gap_past_its_grace_is_counted_by_the_next_message_too() -> None:
    clock = Clock()
    s = fresh(clock)
    s.handle("samples", single(0, 0))
    s.handle("samples", single(3, 3))
    clock.now = GRACE
    [event] = drops(s.handle("samples", single(4, 4)).events)
    assert (event["count"], event["first_seq"], event["last_seq"]) == (2, 1, 2)


def test_samples_a_broker_delivered_out_of_order_are_handled_and_not_counted_as_dropped() -> None:
    """Mosquitto sends a message that arrives for a connected client ahead of older ones still queued for
    it: the older samples come after a gap was seen; they are predicted, and only what never came counts."""
    clock = Clock()
    s = fresh(clock)
    s.handle("samples", single(0, 0))
    s.handle("samples", single(6, 6))  # 1..5 missing
    clock.now = 5.0
    s.handle("samples", single(2, 2))  # late
    s.handle("samples", batch(3, 2, 3))  # 3, 4 late
    s.handle("samples", single(2, 2))  # a redelivery of a late one fills nothing more
    assert s.seq.gaps == [(1, 2, 0.0), (5, 6, 0.0)] and s.seq.expected == 7
    assert s.counters.predictions == 5 and s.counters.duplicates == 1
    [event] = after_grace(s)  # both gaps counted at once: one summary event lists their ranges
    assert (event["first_seq"], event["last_seq"], event["count"]) == (1, 5, 2)
    assert event["ranges"] == [[1, 1], [5, 5]]
    assert s.counters.broker_dropped == 2
    c = s.counters
    assert c.predictions + c.broker_dropped + c.duplicates == 7 + 1  # 7 published, 1 delivered twice


def test_open_gaps_survive_a_checkpoint_with_a_new_grace() -> None:
    clock = Clock()
    s = fresh(clock)
    s.handle("samples", single(0, 0))
    s.handle("samples", single(4, 4))  # 1..3 missing at t = 0
    clock.now = 20.0
    restored = fresh(clock)
    restored.restore(s.snapshot())
    assert restored.seq.gaps == [(1, 4, 20.0)]
    restored.handle("samples", single(1, 1))  # came after the restart
    clock.now = 20.0 + GRACE
    [event] = drops(restored.due_events())
    assert (event["first_seq"], event["last_seq"]) == (2, 3) and restored.counters.broker_dropped == 2


def test_a_late_sample_refused_for_its_share_is_accounted_once() -> None:
    """A gateway refuses (counts in ``overloaded``) a late sample it sees at intake: the sample leaves its
    gap, so it is not counted again as the broker's."""
    s = fresh()
    s.handle("samples", single(0, 0))
    s.handle("samples", single(5, 5))  # 1..4 missing
    assert not s.seq.accounted(2, 2000)  # missing: a refusal of it counts
    s.seq.refuse(2, 2)  # 2, 3 came late and were refused at intake
    assert s.seq.gaps == [(1, 2, 0.0), (4, 5, 0.0)]
    assert s.seq.accounted(0, 2000)  # handled before: a repeat
    after_grace(s)
    assert s.counters.broker_dropped == 2


def test_what_the_agent_accounted_for_itself_is_not_the_brokers() -> None:
    s = fresh()
    s.handle("samples", single(0, 0))
    rejected = s.handle("samples", b'{"samples": [{"id": 1, "x": [1, 2], "colour": 3}, 7], "seq": 1}')
    assert not drops(rejected.events) and s.counters.rejected == 2
    s.handle("samples", b"not json")  # rejected whole: one sample, no seq to read
    s.seq.skipped += 3  # a gateway refused 3 samples of this device (fair share)
    assert not drops(s.handle("samples", single(7, 7)).events)  # 3 + 1 + 3 accounted before 7
    assert not s.seq.gaps and not after_grace(s) and s.counters.broker_dropped == 0


def test_a_device_without_seq_is_not_checked_and_the_expected_seq_is_checkpointed() -> None:
    s = fresh()
    s.handle("samples", single(0))
    s.handle("samples", single(50))
    assert s.counters.broker_dropped == 0 and s.seq.expected is None
    s.handle("samples", single(51, 10))
    restored = fresh()
    restored.restore(s.snapshot())
    assert restored.seq.expected == 11
    restored.handle("samples", single(60, 20))
    after_grace(restored)
    assert restored.counters.broker_dropped == 9
    old = s.snapshot()
    del old["wire_seq"]  # a checkpoint written before issue 30 row 2
    fresh().restore(old)


def test_samples_a_gateway_refused_before_earlier_ones_were_handled_are_not_the_brokers() -> None:
    """A gateway refuses a flood's messages at intake while the device's earlier ones wait in its queue:
    the refusals are matched by their seq, whenever the earlier messages are handled, and a checkpoint
    keeps those not reached yet."""
    s = fresh()
    s.handle("samples", single(0, 0))
    s.seq.refuse(3, 1)  # refused while 1 and 2 were queued
    s.seq.refuse(4, 2)  # a batch of two (merged with the range before)
    s.seq.refuse(9, 1)  # ahead of what the session will see before the checkpoint
    assert list(s.seq.refused) == [(3, 3), (9, 1)]
    s.handle("samples", single(1, 1))
    s.handle("samples", single(2, 2))
    s.handle("samples", single(6, 6))  # 3..5 refused: no gap
    assert not s.seq.gaps and s.counters.broker_dropped == 0
    restored = fresh()
    restored.restore(s.snapshot())
    restored.handle("samples", single(10, 10))  # 7, 8 missing; 9 refused
    after_grace(restored)
    assert restored.counters.broker_dropped == 2 and not restored.seq.refused


def test_a_sample_accounted_for_already_is_told_by_its_seq() -> None:
    """A message refused again after a reconnect must not count twice: its seq was refused before, or is
    within the broker's window before the expected one (handled already)."""
    s = fresh()
    s.handle("samples", single(5000, 5000))
    s.seq.refuse(5003, 2)
    assert s.seq.accounted(4999, 2000) and s.seq.accounted(5000, 2000)  # handled before
    assert s.seq.accounted(5003, 2000) and s.seq.accounted(5004, 2000)  # refused before
    assert not s.seq.accounted(5001, 2000) and not s.seq.accounted(5005, 2000)  # never seen
    assert not s.seq.accounted(10, 2000)  # a publisher that restarted its count: new samples


def test_an_agent_subscribed_with_qos_0_does_not_check_seq() -> None:
    config = SessionConfig(device_id="dev-s", n_features=2, warmup_samples=1000, check_seq=False)
    s = DeviceSession(config, no_cloud, lambda: 0.0)
    s.handle("samples", single(0, 0))
    s.handle("samples", single(9, 9))  # the gap may be its own inbox's drops, counted by the transport
    assert s.counters.broker_dropped == 0 and not s.seq.gaps


def test_refused_ranges_stay_sorted_whatever_the_order_they_come_in() -> None:
    s = fresh()
    s.seq.refuse(10, 2)
    s.seq.refuse(3, 1)  # a publisher that restarted its count
    s.seq.refuse(12, 1)  # adjacent: merged
    assert list(s.seq.refused) == [(3, 1), (10, 3)]
    assert s.seq.accounted(3, 0) and s.seq.accounted(12, 0) and not s.seq.accounted(4, 0)


def test_a_seq_that_jumps_back_and_forth_keeps_a_bounded_list_of_gaps() -> None:
    """A hostile publisher: every message opens a gap, every other one comes late; the open gaps stay at
    ``MAX_GAPS`` (the oldest count at once) and every sample is accounted for once."""
    from edgedrift_edge.session.seq import MAX_GAPS

    s = fresh()
    s.handle("samples", single(0, 0))
    i = 1
    for k in range(1, 301):
        s.handle("samples", single(i, 3 * k))  # 3k - 2, 3k - 1 missing
        i += 1
        s.handle("samples", single(i, 3 * k - 2))  # one of them comes late
        i += 1
        assert len(s.seq.gaps) <= MAX_GAPS
    after_grace(s)
    assert s.counters.broker_dropped == 300 and s.counters.predictions == 601
