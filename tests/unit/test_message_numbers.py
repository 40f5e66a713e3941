"""Numbers on the wire that a device makes up (issue 30's hostile-device kind): every path of the sample
parser reads JSON numbers only (numpy read "1" and true as 1.0 where the fast decoder refused them), a
JSON integer with no float value is refused with its field's reason (``float()`` raised OverflowError:
an internal error), ``seq`` stops at 2^63 - 1, and a heartbeat stays valid whatever the counters hold."""

from __future__ import annotations

import json

import pytest

from edgedrift.wire import INT64_MAX, Heartbeat
from edgedrift_edge.session.device_session import DeviceSession, SessionConfig
from edgedrift_edge.session.messages import parse_labels, parse_samples

BIG = "1" * 400


@pytest.mark.parametrize("d", [2, None])  # the width known (fast paths first) or not yet (warm-up)
@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ({"id": 1, "x": ["1", 2.0]}, "x must be a list of numbers"),
        ({"id": 1, "x": [True, 2.0]}, "x must be a list of numbers"),
        ({"id": 1, "x": [[1], 2.0]}, "x must be a list of numbers"),
        ({"id": 1, "x": [int(BIG), 2.0]}, "x contains NaN or inf"),
        ({"id": 1, "x": [1.0, 2.0], "ts": int(BIG)}, "ts must be a finite number"),
        ({"id": 1, "x": [1.0, 2.0], "y": int(BIG)}, "y is not a finite number"),
    ],
)
def test_a_number_that_is_not_a_float_is_refused_with_its_reason(
    item: dict[str, object], reason: str, d: int | None
) -> None:
    for payload in (json.dumps(item), json.dumps({"samples": [item, {"id": 2, "x": [1.0, 2.0]}]})):
        parsed = parse_samples(payload.encode(), d, "regression", 0)
        assert [r.reason for r in parsed.rejected] == [reason]
        assert len(parsed.ids) == payload.count('"samples"')  # the batch's good sample is kept


def test_a_label_without_a_float_value_and_a_seq_past_2_63_are_refused() -> None:
    good, rejected = parse_labels(
        json.dumps({"labels": [{"id": 1, "y": int(BIG)}, {"id": 2, "y": 1}]}).encode(), "regression"
    )
    assert [sid for sid, _ in good] == [2] and rejected[0].reason == "y is not a finite number"
    for seq, ok in ((2**63 - 1, True), (2**63, False)):
        for payload in (
            {"id": 1, "x": [1.0, 2.0], "seq": seq},
            {"samples": [{"id": 1, "x": [1.0, 2.0]}], "seq": seq},
        ):
            s = DeviceSession(SessionConfig(device_id="d", n_features=2), lambda _r: None, lambda: 0.0)
            out = s.handle("samples", json.dumps(payload).encode())
            assert (len(out.predictions) == 1) is ok and (s.counters.rejected == 0) is ok


def test_a_heartbeat_stays_valid_whatever_the_counters_hold() -> None:
    """A gap in ``seq`` can claim up to 2^63 samples dropped, on top of what the device itself dropped: the
    heartbeat saturates at the registry's BIGINT instead of failing validation (which ended a gateway's
    worker)."""
    s = DeviceSession(SessionConfig(device_id="d", n_features=2), lambda _r: None, lambda: 0.0)
    s.counters.dropped = s.counters.rejected = s.counters.samples = 10**20
    s.counters.label_misses = 10**20
    beat = s.heartbeat()
    assert isinstance(beat, Heartbeat) and beat.dropped == beat.rejected == beat.samples == INT64_MAX
    assert beat.extra["label_misses"] == INT64_MAX
