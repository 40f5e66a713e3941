"""A device's first window keeps rows, labels and ids packed (no Python object per sample): late labels
still find their sample by id, the oldest samples leave together, and checkpoints round-trip, including
those written when the window kept the ids themselves."""

from __future__ import annotations

import math

import numpy as np

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
