"""The recent-score ring behind a device's recent accuracy: the newest ``maxlen`` scores, oldest first,
what a full window evicts, and a snapshot that restores the same window."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from edgedrift_edge.buffers.score_window import ScoreWindow


def test_the_ring_matches_a_bounded_deque_while_it_grows_and_wraps() -> None:
    rng = np.random.default_rng(0)
    window, model = ScoreWindow(200), deque[float](maxlen=200)
    for step in range(1000):
        score = float(rng.random())
        expected = model[0] if len(model) == model.maxlen else None
        assert window.push(score) == expected
        model.append(score)
        if step % 37 == 0:
            assert window.values().tolist() == list(model)
    assert len(window) == 200 and window.values().tolist() == list(model)
    assert len(window._buf) == 200, "grown by doubling, never beyond maxlen"


def test_a_restored_window_continues_where_the_snapshot_left_off() -> None:
    window = ScoreWindow(5, [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    assert window.values().tolist() == [1.0, 1.0, 0.0, 1.0, 1.0]
    again = ScoreWindow(5, window.values().tolist())
    assert again.push(0.5) == window.push(0.5) == 1.0
    assert again.values().tolist() == window.values().tolist()
    assert ScoreWindow(1000)._buf.size == 64, "a fresh device holds 64 scores, not 1000"
    with pytest.raises(ValueError):
        ScoreWindow(0)
