"""A gateway's per-device recent samples (the window behind deduplication and late labels' joins) are
sized from the label delay and the device's rate (``edgedrift.window.delay_buffer_size``), not fixed at
50k entries per device; a single-device agent keeps its fixed size. Within the sized window a redelivery
is still recognised and a label that arrives within the configured delay still joins its sample."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.sessions import DELAY, RATE, gateway, running, sample, train

from edgedrift import state
from edgedrift.window import delay_buffer_size
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.buffers.id_index import id_key
from edgedrift_edge.checkpoints import CheckpointStore
from edgedrift_edge.device import session_config
from edgedrift_edge.session import codec
from edgedrift_edge.session import dedup as session_dedup
from edgedrift_edge.session.device_session import DeviceSession, Output
from edgedrift_edge.session.messages import CONTENT_HASH, UNKNOWN_CONTENT, content_keys_of
from edgedrift_edge.settings import AgentSettings, SettingsError

SIZE = delay_buffer_size(RATE, DELAY)  # ceil(2 * 50 * 1.5) = 150


def test_a_gateway_of_1000_devices_sizes_every_devices_buffers_from_the_label_delay(tmp_path: Path) -> None:
    assert SIZE == 150
    devices = {f"dev-{i}": None for i in range(1000)}
    agent = EdgeAgent(gateway(tmp_path), devices=devices)
    try:
        assert len(agent.devices) == 1000
        assert {d.session.config.recent_samples for d in agent.devices.values()} == {SIZE}
    finally:
        agent.cloud.close()


def test_a_single_device_agent_keeps_its_fixed_sizes_and_explicit_sizes_win(tmp_path: Path) -> None:
    one = AgentSettings.model_validate({"device_id": "dev-1", "checkpoint_dir": str(tmp_path)})
    config = session_config(one, "dev-1")
    assert config.recent_samples == 50_000
    slow = one.model_copy(update={"label_delay_s": 3600.0, "device_rate_per_s": 100.0})
    config = session_config(slow, "dev-1")  # a delay longer than the fixed size covers: sized up
    assert config.recent_samples == 540_000
    assert session_config(gateway(tmp_path, recent_samples=70), "dev-1").recent_samples == 70


def test_the_former_two_sizes_are_refused_with_the_new_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="set recent_samples instead"):
        gateway(tmp_path, join_buffer=70)
    environ = {"EDGEDRIFT_EDGE_DEVICE_ID": "dev-1", "EDGEDRIFT_EDGE_DEDUP_WINDOW": "80"}
    with pytest.raises(SettingsError, match="EDGEDRIFT_EDGE_DEDUP_WINDOW: the join buffer and the dup"):
        AgentSettings.load(environ=environ)


def test_the_window_stays_at_its_size_and_evictions_are_counted(tmp_path: Path) -> None:
    s, X = running(gateway(tmp_path))
    for i in range(100, 100 + 3 * SIZE):
        s.handle("samples", sample(i, X[i]))
    recent = s.recent_samples
    assert len(recent) == SIZE and recent.waiting == SIZE
    # the warm-up's 50 unlabeled samples and the first 2 * SIZE of these waited in vain
    assert s.counters.join_evictions == 50 + 2 * SIZE
    oldest = 100 + 2 * SIZE
    assert recent.awaits(oldest) and oldest - 1 not in recent, "the oldest entries go first"


def test_a_redelivery_within_the_window_is_recognised_and_older_ones_are_not(tmp_path: Path) -> None:
    s, X = running(gateway(tmp_path))
    for i in range(100, 100 + 2 * SIZE):
        s.handle("samples", sample(i, X[i], 1.0 if i % 10 == 0 else None))
    assert s.loop is not None
    labeled = s.loop.counters.labeled
    oldest_kept = 100 + SIZE  # the window holds the newest SIZE ids
    assert oldest_kept % 10 == 0, "a labeled sample: learning its redelivery would show"
    again = s.handle("samples", sample(oldest_kept, X[oldest_kept], 1.0))
    assert again.predictions[0].get("repeat") is True and s.counters.duplicates == 1
    assert s.loop.counters.labeled == labeled, "a redelivery inside the window is not learned twice"
    gone = 100  # SIZE samples later its id left the window: processed as a new sample
    s.handle("samples", sample(gone, X[gone], 1.0))
    assert s.counters.duplicates == 1 and s.loop.counters.labeled == labeled + 1


def test_a_label_within_the_configured_delay_joins_and_a_later_one_is_a_counted_miss(tmp_path: Path) -> None:
    s, X = running(gateway(tmp_path))
    assert s.loop is not None
    within = int(RATE * DELAY)  # the samples that arrive at the configured rate within the longest delay
    s.handle("samples", sample(1000, X[1000]))
    s.handle("samples", sample(1001, X[1001]))
    for i in range(1002, 1002 + within):
        s.handle("samples", sample(i, X[i]))
    labeled = s.loop.counters.labeled
    out = s.handle("labels", json.dumps({"id": 1000, "y": 1.0}).encode())
    assert not [e for e in out.events if e["type"] == "label_miss"]
    assert s.loop.counters.labeled == labeled + 1 and s.counters.label_misses == 0
    for i in range(1002 + within, 1002 + within + SIZE):
        s.handle("samples", sample(i, X[i]))
    out = s.handle("labels", json.dumps({"id": 1001, "y": 1.0}).encode())
    assert [e["id"] for e in out.events if e["type"] == "label_miss"] == [1001]
    assert s.counters.label_misses == 1


def test_a_checkpoint_of_larger_buffers_resumes_into_the_gateways_sizes(tmp_path: Path) -> None:
    big, X = running(gateway(tmp_path, recent_samples=1000))
    for i in range(100, 700):
        big.handle("samples", sample(i, X[i], 1.0 if i % 10 == 0 else None))
    tree, _ = state.loads(state.dumps(big.snapshot()))
    assert isinstance(tree, dict)
    small = DeviceSession(session_config(gateway(tmp_path), "dev-1"), train, lambda: 0.0)
    small.restore(tree)
    mine, theirs = small.recent_samples.snapshot(), big.recent_samples.snapshot()
    for name in ("id_keys", "id_checks", "keys"):
        assert np.array_equal(mine[name], theirs[name][-SIZE:]), name
    kept = theirs["waiting"] >= len(theirs["keys"]) - SIZE  # the unlabeled among the newest SIZE
    assert mine["waiting"].tolist() == (theirs["waiting"][kept] - (len(theirs["keys"]) - SIZE)).tolist()
    assert np.array_equal(mine["X"], theirs["X"][kept])
    assert np.array_equal(mine["y_hat"], theirs["y_hat"][kept])
    assert small.recent_samples.waiting == SIZE - SIZE // 10, "every 10th sample was labeled"
    left_out = big.recent_samples.waiting - small.recent_samples.waiting
    assert small.counters.join_evictions == big.counters.join_evictions + left_out


def test_checkpoint_rows_pack_into_one_matrix_unless_their_widths_differ() -> None:
    mixed = [np.array([1.0, 2.0]), np.array([0.1, 0.2, 0.3])]
    X = codec.pack_rows(mixed)  # warm-up rows of several widths stay a list
    assert isinstance(X, list) and [r.tolist() for r in codec.unpack_rows(X)] == [[1.0, 2.0], [0.1, 0.2, 0.3]]
    same = [np.array([i, i + 1 / 3]) for i in range(3)]
    X = codec.pack_rows(same)
    assert isinstance(X, np.ndarray) and X.tolist() == [[i, i + 1 / 3] for i in range(3)]
    assert np.shape(codec.pack_rows([])) == (0, 0)
    rows = codec.unpack_rows(X)
    rows[1][0] = 9.0  # writable copies: the learner may use them freely
    assert X[1].tolist() == [1.0, 1 + 1 / 3]


def test_a_checkpoint_written_by_the_ordered_dict_buffers_still_restores(tmp_path: Path) -> None:
    """The former tree shape, from before the recent samples were one window (``"joins": {"ids", "X",
    "y_hat"}``, ``"recent_ids": {"ids", "keys"}``, ids as they came): the restored session joins a late
    label and recognises a redelivery."""
    s, X = running(gateway(tmp_path))
    ids: list[int | str] = [i if i % 2 else f"s-{i}" for i in range(100, 130)]
    for i, sid in zip(range(100, 130), ids, strict=True):
        s.handle("samples", json.dumps({"id": sid, "x": X[i].tolist()}).encode())
    tree = s.snapshot()
    recent = tree.pop("recent_samples")
    unlabeled = [*range(1, 100, 2), *ids]  # the warm-up's unlabeled samples wait for labels too
    assert recent["id_keys"].tolist() == [id_key(sid)[0] for sid in [*range(100), *ids]]
    assert recent["id_keys"][recent["waiting"]].tolist() == [id_key(sid)[0] for sid in unlabeled]
    tree["joins"] = {"ids": unlabeled, "X": recent["X"], "y_hat": recent["y_hat"]}
    tree["recent_ids"] = {"ids": [*range(100), *ids], "keys": recent["keys"]}
    old, _ = state.loads(state.dumps(tree))
    assert isinstance(old, dict)
    again = DeviceSession(session_config(gateway(tmp_path), "dev-1"), train, lambda: 0.0)
    again.restore(old)
    assert again.loop is not None and again.recent_samples.waiting == s.recent_samples.waiting == 80
    labeled = again.loop.counters.labeled
    out = again.handle("labels", json.dumps({"id": "s-110", "y": 1.0}).encode())
    assert not out.events and again.loop.counters.labeled == labeled + 1, "the late label joined"
    repeat = again.handle("samples", json.dumps({"id": 111, "x": X[111].tolist()}).encode())
    assert repeat.predictions[0].get("repeat") is True and again.counters.duplicates == 1
    assert (
        again.handle("labels", json.dumps({"id": 110, "y": 1.0}).encode()).events[0]["type"] == "label_miss"
    )


def _python_tuple_hash(x: list[float], y: float, ts: float) -> int:
    """The content digest checkpoints kept before the stable one: CPython's hash of (*x, y, ts), NaN as a
    fixed stand-in (edgedrift_edge.session.messages.content_keys until issue 29)."""
    nan_key = -7.7e-311
    return hash((*x, y if y == y else nan_key, ts if ts == ts else nan_key))


def test_a_checkpoint_with_the_former_python_hash_digests_loads(tmp_path: Path) -> None:
    """A checkpoint written the old way (its digests CPython's tuple hash, no ``content_hash`` field) loads:
    the ids and the waiting rows are kept, the digests dropped (unknown: a repeat of such an id counts as
    a redelivery, never as a reused id processed twice); new samples get the stable digests, which the
    next checkpoint records."""
    s, X = running(gateway(tmp_path))
    for i in range(100, 130):
        s.handle("samples", sample(i, X[i]))
    tree = s.snapshot()
    recent = tree["recent_samples"]
    assert recent.pop("content_hash") == CONTENT_HASH
    old_keys = [_python_tuple_hash(X[i].tolist(), np.nan, np.nan) for i in range(100, 130)]
    recent["keys"] = np.concatenate([recent["keys"][:-30], np.array(old_keys, np.int64)])
    store = CheckpointStore(tmp_path / "old", "dev-1")
    store.save({"session": tree})
    loaded = store.load()
    assert loaded is not None
    again = DeviceSession(session_config(gateway(tmp_path), "dev-1"), train, lambda: 0.0)
    again.restore(loaded["session"])
    restored = again.recent_samples.snapshot()
    assert restored["content_hash"] == CONTENT_HASH
    assert restored["id_keys"].tolist() == s.recent_samples.snapshot()["id_keys"].tolist()
    assert (restored["keys"] == UNKNOWN_CONTENT).all(), "the former digests are dropped, not misread"
    assert again.recent_samples.waiting == s.recent_samples.waiting
    redelivered = again.handle("samples", sample(111, X[111]))
    assert redelivered.predictions[0].get("repeat") is True and again.counters.duplicates == 1
    assert again.counters.id_reused == 0
    again.handle("samples", sample(500, X[500]))  # a new sample: a stable digest
    unlabeled = np.full(1, np.nan)
    assert again.recent_samples.get(500) == int(content_keys_of(X[500:501], unlabeled, unlabeled)[0])
    reused = again.handle("samples", sample(500, X[501]))  # same id, other content
    assert not reused.predictions[0].get("repeat") and again.counters.id_reused == 1


def batch(start: int, X: np.ndarray, n: int) -> bytes:
    """Samples ``start`` to ``start + n`` in one message, every 10th labeled."""
    rows: list[dict[str, Any]] = []
    for i in range(start, start + n):
        rows.append({"id": i, "x": X[i].tolist()})
        if i % 10 == 0:
            rows[-1]["y"] = 1.0 if X[i].sum() > 0 else -1.0
    return json.dumps({"samples": rows}).encode()


def same_events(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Equal but for the request ids (each session draws its own epoch)."""
    strip = [{k: v for k, v in e.items() if k != "request_id"} for e in a + b]
    return strip[: len(a)] == strip[len(a) :]


def test_a_batch_through_the_windows_in_one_pass_equals_one_id_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of new int ids take the vectorised path (``session_dedup.BATCH_WORDS``); with it turned
    off the same messages go one id at a time. Both sessions must agree on everything: predictions,
    the windows' contents and order, counters, and what redeliveries, a reused id and late labels do."""
    fast, X = running(gateway(tmp_path))
    slow, _ = running(gateway(tmp_path / "slow"))

    def both(kind: str, payload: bytes) -> Output:
        a = fast.handle(kind, payload)
        with monkeypatch.context() as m:
            m.setattr(session_dedup, "BATCH_WORDS", 10**9)
            b = slow.handle(kind, payload)
        assert a.predictions == b.predictions and same_events(a.events, b.events)
        return a

    for start in range(100, 100 + 3 * SIZE, 50):  # the windows fill and evict
        both("samples", batch(start, X, 50))
    a = both("samples", batch(450, X, 50))  # a redelivery of a whole batch still in the window
    assert all(p.get("repeat") for p in a.predictions) and fast.counters.duplicates == 50
    reused = json.loads(batch(560, X, 20))
    reused["samples"][0]["id"] = 545  # an id still in the window, with other content
    a = both("samples", json.dumps(reused).encode())
    assert [e["type"] for e in a.events].count("id_reused") == 1
    for i in (541, 543, 101):  # two joins and one long evicted
        both("labels", json.dumps({"id": i, "y": 1.0}).encode())
    assert fast.counters == slow.counters and fast.counters.label_misses == 1
    mine, other = fast.recent_samples.snapshot(), slow.recent_samples.snapshot()
    assert mine.keys() == other.keys()
    for name in mine:
        assert np.array_equal(mine[name], other[name]), name
