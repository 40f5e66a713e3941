"""The pure parts of issue 30 rows 6, 7 and 10, without a broker: the one device-id check, the checkpoint
store's file names and counters file, and a session's warm-up report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgedrift.ids import device_id_problem, shown_id
from edgedrift_edge.checkpoints import CheckpointStore
from edgedrift_edge.device_ids import DeviceIds
from edgedrift_edge.session.device_session import DeviceSession, SessionConfig
from edgedrift_edge.settings import SettingsError

BAD = ["a+b", "#", "x/y", "../../escape", "z" * 300, "", "-lead", "dot.ted", "new\nline"]


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_device_id_has_a_reason_and_names_no_file(bad: str, tmp_path: Path) -> None:
    assert device_id_problem(bad)
    with pytest.raises(ValueError, match="no checkpoint file"):
        CheckpointStore(tmp_path, bad)
    assert len(shown_id(bad)) <= 40


def test_good_ids_pass_and_a_gateway_refuses_bad_ones_alone() -> None:
    assert all(device_id_problem(d) is None for d in ("dev-1", "A", "x" * 64, "a_b-9"))
    ids = DeviceIds("gw-1")
    assert ids.admitted({"dev-1": "s", "a+b": None, "#": None}) == {"dev-1": "s"}
    assert ids.news() and not ids.news()
    assert ids.admitted({"a+b": None}) == {} and not ids.news()  # refused once, listed once
    assert [r["id"] for r in ids.listing()] == ["'a+b'", "'#'"]
    with pytest.raises(SettingsError, match="every device id was refused"):
        DeviceIds("gw-2").admitted({"x/y": None}, need_one=True)


def test_a_gateway_with_a_session_per_device_refuses_devices_past_its_limit_alone() -> None:
    ids = DeviceIds("gw-1", limit=2)
    assert ids.admitted({"d3": None, "d1": "s", "a+b": None, "d2": None}) == {"d1": "s", "d2": None}
    assert [r["id"] for r in ids.listing()] == ["'a+b'", "'d3'"]
    assert "at most 2 devices" in ids.refused["'d3'"]


def test_the_counters_file_round_trips_and_ignores_what_is_not_this_devices(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "dev-1")
    assert store.load_counters() == {}
    store.save_counters({"samples": 7, "rejected": 1})
    assert store.load_counters() == {"samples": 7, "rejected": 1}
    other = {"device_id": "dev-2", "counters": {"samples": 9}}
    store.counters_path.write_text(json.dumps(other))
    assert store.load_counters() == {}
    store.counters_path.write_text('{"device_id": "dev-1", "counters": {"samples": -3, "x": "y"}}')
    assert store.load_counters() == {}
    store.counters_path.write_text("[1, 2")
    assert store.load_counters() == {}


def test_a_warm_up_of_rejected_labels_says_why_once_per_cause() -> None:
    config = SessionConfig(device_id="dev-w", warmup_samples=20, window_labels=10, C=1.0, n_features=1)
    s = DeviceSession(config, lambda request: None, lambda: 0.0)
    events = []
    for i in range(100):
        out = s.handle("samples", json.dumps({"id": i, "x": [i / 100], "y": i % 2}).encode())
        events += out.events
    stalls = [e for e in events if e["type"] == "warmup_stalled"]
    assert [e["cause"] for e in stalls] == ["one_class"] * len(stalls) and 1 <= len(stalls) <= 3
    assert stalls[0]["rejected_labels"] > 0 and "classes" in stalls[0]["reason"]
    state = s.warmup_state()
    assert state is not None and state["rejected_labels"] == 50 == s.counters.rejected_labels
    assert state["classes_seen"] == 1 and state["reason"] and s.status()["warmup"] == state
