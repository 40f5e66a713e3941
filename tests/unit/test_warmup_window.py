"""A device's first window keeps rows, labels and ids packed (no Python object per sample): late labels
still find their sample by id, the oldest samples leave together, and checkpoints round-trip, including
those written when the window kept the ids themselves; a full window that cannot train is judged from
its labels and widths without reading a row."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import numpy as np
import pytest

from edgedrift.models.losses import FloatArray
from edgedrift_edge.buffers.packed_rows import PackedRows
from edgedrift_edge.session.device_session import DeviceSession
from edgedrift_edge.session.ledger import SessionConfig
from edgedrift_edge.session.warmup import WarmupWindow


def window(samples: list[tuple[object, float]]) -> WarmupWindow:
    warm = WarmupWindow(SessionConfig(device_id="dev-w", warmup_samples=10))
    for k, (sid, y) in enumerate(samples):
        warm.add(np.full(2, float(k)), y, sid)  # type: ignore[arg-type]
    return warm


def test_a_late_label_joins_its_sample_by_id_whatever_the_id_type() -> None:
    warm = window([(7, math.nan), ("a-7", math.nan), (2**70, math.nan), (None, math.nan)])
    warm.label("a-7", 1.0)
    warm.label(2**70, -1.0)
    warm.label(8, 1.0)  # not in the window: nothing changes
    assert [None if math.isnan(y) else y for y in warm.y] == [None, 1.0, -1.0, None]
    warm.label(7, -1.0)
    assert warm.y[0] == -1.0


def test_the_newest_sample_with_a_reused_id_takes_the_label() -> None:
    warm = window([(5, math.nan), (5, math.nan)])
    warm.label(5, 1.0)
    assert math.isnan(warm.y[0]) and warm.y[1] == 1.0


def test_bound_drops_rows_labels_and_ids_together() -> None:
    warm = window([(i, math.nan) for i in range(6)])
    warm.bound(2)
    assert len(warm) == 2 and [r[0] for r in warm.rows] == [4.0, 5.0]
    warm.label(1, 1.0)  # left with the oldest
    warm.label(5, 1.0)
    assert math.isnan(warm.y[0]) and warm.y[1] == 1.0


def test_a_put_back_window_has_no_ids_and_keeps_what_came_since() -> None:
    warm = window([(9, math.nan)])
    warm.put_back(np.zeros((2, 2)), np.array([1.0, -1.0]))
    assert list(warm.y)[:2] == [1.0, -1.0] and len(warm.rows) == 3
    warm.label(0, -1.0)  # the put-back samples have no id: id 0 matches none of them
    assert list(warm.y)[:2] == [1.0, -1.0]
    warm.label(9, 1.0)
    assert warm.y[2] == 1.0


def test_a_checkpoint_round_trips_and_a_former_one_with_ids_restores() -> None:
    warm = window([(1, 1.0), ("s", math.nan), (None, -1.0)])
    tree: dict[str, object] = {}
    warm.snapshot(tree)
    again = window([])
    again.restore(tree)
    assert list(again.id_keys) == list(warm.id_keys) and list(again.id_checks) == list(warm.id_checks)
    assert [r.tolist() for r in again.rows] == [r.tolist() for r in warm.rows]
    former = {"warm_rows": tree["warm_rows"], "warm_y": tree["warm_y"], "warm_ids": [1, "s", None]}
    old = window([])
    old.restore(former)
    assert list(old.id_keys) == list(warm.id_keys) and list(old.id_checks) == list(warm.id_checks)
    old.label("s", 1.0)
    assert old.y[1] == 1.0


def test_a_full_window_that_cannot_train_reads_no_row_while_it_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device stuck in warm-up (no labels, one class, rejected labels) asks at every sample whether its
    full window can train: the answer comes from the labels and widths alone, so a stuck device costs
    what a warming one does (walking the rows cost 2 ms a sample at 1,000 rows, 4 ms at the default)."""
    config = SessionConfig(device_id="dev-w", n_features=None, warmup_samples=50, seq_grace_s=1.0)
    s = DeviceSession(config, lambda _request: None, lambda: 0.0)
    reads: list[int] = []
    real_iter = PackedRows.__iter__

    def counted(self: PackedRows) -> Iterator[FloatArray]:
        reads.append(len(self))
        return real_iter(self)

    monkeypatch.setattr(PackedRows, "__iter__", counted)
    for i in range(200):  # unlabeled: the window fills at 50 and stays stuck
        s.handle("samples", json.dumps({"id": i, "x": [i / 10, 1.0]}).encode())
    assert s.phase == "warmup" and reads == []
    state = s.warmup_state()
    assert state is not None and state["labels"] == 0 and state["reason"]
    for i in range(200, 220):  # labels of two classes: the next full check trains (no cloud: awaits it)
        s.handle("samples", json.dumps({"id": i, "x": [i / 10, 1.0], "y": 1 if i % 2 else -1}).encode())
    assert str(s.phase) == "awaiting_model" and reads


def test_the_common_width_is_the_most_frequent_and_of_a_tie_the_first_seen() -> None:
    warm = WarmupWindow(SessionConfig(device_id="dev-w", warmup_samples=10))
    for width in (3, 2, 2, 3, 5):
        warm.add(np.zeros(width), math.nan, None)
    assert warm.common_width() == 3
    warm.add(np.zeros(2), 1.0, None)
    assert warm.common_width() == 2
    assert warm.labels().tolist() == [1.0] and warm.labels(3).size == 0 and warm.labels(2).tolist() == [1.0]


def test_wide_rows_keep_a_device_stuck_in_warm_up_within_its_byte_budget() -> None:
    """Row 8's kind for the first window: rows of 1,000 features, never labeled. The first window is
    full at the budget (``recent_bytes``) before ``warmup_samples``, and neither it nor the recent
    samples hold more than the budget while the device stays stuck (4,000 rows of 4,096 features, 131 MB,
    and 1.6 GB of recent samples for the single agent's defaults before)."""
    budget = 1024 * 1024
    config = SessionConfig(device_id="dev-w", warmup_samples=2000, recent_samples=50_000, recent_bytes=budget)
    s = DeviceSession(config, lambda _request: None, lambda: 0.0)
    row = [0.25] * 1000
    for i in range(600):
        s.handle("samples", json.dumps({"id": i, "x": row}).encode())
        assert s.warm.rows.nbytes <= budget and s.recent_samples.nbytes <= budget + 64 * 1024, i
    state = s.warmup_state()
    assert s.phase == "warmup" and state is not None and state["reason"], "full at the budget, and stuck"
    assert len(s.warm) == budget // 8000 and s.counters.samples == 600
