"""Tests of edgedrift.window: the count-based and time-based sliding windows on a ring buffer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgedrift.window import CountWindow, TimeWindow


def row(i: int, d: int = 3) -> np.ndarray:
    """A recognisable sample: every feature encodes the sample number i."""
    return np.array([i + 0.1 * k for k in range(d)], dtype=np.float64)


def rows(ids: list[int], d: int = 3) -> np.ndarray:
    return np.array([row(i, d) for i in ids]).reshape(len(ids), d)


# --- CountWindow ---------------------------------------------------------------------------------------


def test_count_window_fills_without_evicting() -> None:
    w = CountWindow(size=4, n_features=3)
    assert len(w) == 0
    assert not w.is_full
    for i in range(4):
        assert w.push(row(i), float(i)) == 0
        assert len(w) == i + 1
    assert w.is_full
    X, y = w.contents()
    np.testing.assert_array_equal(X, rows([0, 1, 2, 3]))
    np.testing.assert_array_equal(y, [0.0, 1.0, 2.0, 3.0])


def test_count_window_fifo_eviction_reports_the_evicted_row() -> None:
    w = CountWindow(size=4, n_features=3)
    for i in range(4):
        w.push(row(i), float(i))
    for i in range(4, 15):
        assert w.push(row(i), float(i)) == 1
        evicted = i - 4
        np.testing.assert_array_equal(w.evicted_X[0], row(evicted))
        assert w.evicted_y[0] == float(evicted)
        assert len(w) == 4
        assert w.is_full
        X, y = w.contents()
        # Oldest first, across the wrap-around of the ring buffer.
        np.testing.assert_array_equal(X, rows(list(range(i - 3, i + 1))))
        np.testing.assert_array_equal(y, np.arange(i - 3, i + 1, dtype=float))
    assert w.n_pushed == 15


def test_count_window_contents_are_copies() -> None:
    w = CountWindow(size=3, n_features=3)
    for i in range(5):
        w.push(row(i), float(i))
    X, y = w.contents()
    X[:] = -1.0
    y[:] = -1.0
    X2, y2 = w.contents()
    np.testing.assert_array_equal(X2, rows([2, 3, 4]))
    np.testing.assert_array_equal(y2, [2.0, 3.0, 4.0])


def test_count_window_push_copies_the_sample() -> None:
    w = CountWindow(size=3, n_features=3)
    x = row(7)
    w.push(x, 1.0)
    x[:] = 0.0
    np.testing.assert_array_equal(w.contents()[0][0], row(7))


@pytest.mark.parametrize("n_pushed", [3, 5, 6, 9])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 10])
def test_count_window_keep_last(n_pushed: int, k: int) -> None:
    size = 5
    w = CountWindow(size=size, n_features=3)
    for i in range(n_pushed):
        w.push(row(i), float(i))
    held = list(range(max(0, n_pushed - size), n_pushed))
    w.keep_last(k)
    kept = held[len(held) - min(k, len(held)) :]
    assert len(w) == len(kept)
    X, y = w.contents()
    np.testing.assert_array_equal(X, rows(kept))
    np.testing.assert_array_equal(y, np.array(kept, dtype=float))
    assert w.is_full == (len(kept) == size)
    # The window keeps working after the restart: it refills and then evicts the oldest kept sample.
    nxt = n_pushed
    while not w.is_full:
        assert w.push(row(nxt), float(nxt)) == 0
        kept.append(nxt)
        nxt += 1
    assert w.push(row(nxt), float(nxt)) == 1
    np.testing.assert_array_equal(w.evicted_X[0], row(kept[0]))
    assert w.evicted_y[0] == float(kept[0])
    np.testing.assert_array_equal(w.contents()[1], np.array([*kept[1:], nxt], dtype=float))


def test_count_window_timestamps_follow_contents() -> None:
    w = CountWindow(size=3, n_features=3)
    for i in range(7):
        w.push(row(i), float(i), ts=100.0 + i)
    np.testing.assert_array_equal(w.timestamps(), [104.0, 105.0, 106.0])


def test_count_window_clear() -> None:
    w = CountWindow(size=3, n_features=3)
    for i in range(4):
        w.push(row(i), float(i))
    w.clear()
    assert len(w) == 0
    assert not w.is_full
    assert w.push(row(10), 10.0) == 0
    np.testing.assert_array_equal(w.contents()[1], [10.0])


def test_count_window_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        CountWindow(size=0, n_features=3)
    with pytest.raises(ValueError):
        CountWindow(size=3, n_features=0)


def test_count_window_random_against_a_list_model() -> None:
    """A random mix of pushes and keep_last calls agrees with a plain Python list."""
    rng = np.random.default_rng(3)
    size = 7
    w = CountWindow(size=size, n_features=2)
    model: list[int] = []
    for i in range(400):
        if rng.random() < 0.05:
            k = int(rng.integers(0, size + 2))
            w.keep_last(k)
            model = model[len(model) - min(k, len(model)) :]
            continue
        n_ev = w.push(row(i, 2), float(i))
        model.append(i)
        if len(model) > size:
            gone = model.pop(0)
            assert n_ev == 1
            assert w.evicted_y[0] == float(gone)
        else:
            assert n_ev == 0
        X, y = w.contents()
        np.testing.assert_array_equal(y, np.array(model, dtype=float))
        np.testing.assert_array_equal(X, rows(model, 2))


# --- TimeWindow ----------------------------------------------------------------------------------------


def test_time_window_evicts_at_exactly_the_horizon() -> None:
    w = TimeWindow(horizon=10.0, n_features=3)
    assert w.push(row(0), 0.0, ts=0.0) == 0
    assert w.push(row(1), 1.0, ts=5.0) == 0
    # ts = 9.999: cutoff -0.001, nothing expires.
    assert w.push(row(2), 2.0, ts=9.999) == 0
    # ts = 10: cutoff 0, the sample at ts 0 (<= cutoff) expires.
    assert w.push(row(3), 3.0, ts=10.0) == 1
    np.testing.assert_array_equal(w.evicted_X[0], row(0))
    assert w.evicted_y[0] == 0.0
    np.testing.assert_array_equal(w.contents()[1], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(w.timestamps(), [5.0, 9.999, 10.0])


def test_time_window_evicts_several_at_once() -> None:
    w = TimeWindow(horizon=5.0, n_features=3, initial_capacity=8)
    for i in range(6):
        w.push(row(i), float(i), ts=float(i))  # ts 0..5; at ts 5 the sample at ts 0 expired
    np.testing.assert_array_equal(w.contents()[1], [1.0, 2.0, 3.0, 4.0, 5.0])
    # A jump to ts 8.5 (cutoff 3.5) evicts ts 1, 2, 3 in one push.
    n = w.push(row(99), 99.0, ts=8.5)
    assert n == 3
    np.testing.assert_array_equal(w.evicted_X[:3], rows([1, 2, 3]))
    np.testing.assert_array_equal(w.evicted_y[:3], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(w.contents()[1], [4.0, 5.0, 99.0])
    # A jump far ahead empties the window of everything older.
    n = w.push(row(100), 100.0, ts=1000.0)
    assert n == 3
    np.testing.assert_array_equal(w.evicted_y[:3], [4.0, 5.0, 99.0])
    np.testing.assert_array_equal(w.contents()[1], [100.0])


def test_time_window_large_eviction_grows_the_evicted_buffer() -> None:
    w = TimeWindow(horizon=100.0, n_features=3, initial_capacity=4)
    for i in range(50):
        w.push(row(i), float(i), ts=float(i))
    n = w.push(row(500), 500.0, ts=500.0)
    assert n == 50
    np.testing.assert_array_equal(w.evicted_X[:50], rows(list(range(50))))
    np.testing.assert_array_equal(w.evicted_y[:50], np.arange(50, dtype=float))
    assert len(w) == 1


def test_time_window_growth_keeps_order_across_a_wrapped_ring() -> None:
    w = TimeWindow(horizon=10.0, n_features=3, initial_capacity=4)
    # Fill and slide so that the ring wraps: ts 0..12 with horizon 10 keeps ts 3..12 eventually.
    for i in range(3):
        w.push(row(i), float(i), ts=float(i))
    for i in range(3, 13):
        w.push(row(i), float(i), ts=float(i))
    # Then a burst at the same timestamp (nothing expires) forces several doublings.
    burst = list(range(13, 60))
    for i in burst:
        assert w.push(row(i), float(i), ts=12.0) == 0
    expected = [*range(3, 13), *burst]
    X, y = w.contents()
    np.testing.assert_array_equal(y, np.array(expected, dtype=float))
    np.testing.assert_array_equal(X, rows(expected))
    np.testing.assert_array_equal(w.timestamps(), [float(i) for i in range(3, 13)] + [12.0] * len(burst))
    assert w.capacity >= len(expected)
    # Eviction after the growth still removes the oldest first.
    assert w.push(row(60), 60.0, ts=13.5) == 1
    assert w.evicted_y[0] == 3.0


def test_time_window_random_against_a_list_model() -> None:
    rng = np.random.default_rng(11)
    horizon = 7.5
    w = TimeWindow(horizon=horizon, n_features=2, initial_capacity=2)
    model: list[tuple[int, float]] = []
    ts = 0.0
    for i in range(600):
        ts += float(rng.choice([0.0, 0.5, 1.0, 3.0, 9.0], p=[0.3, 0.3, 0.2, 0.15, 0.05]))
        n = w.push(row(i, 2), float(i), ts=ts)
        gone = [j for j, t in model if t <= ts - horizon]
        model = [(j, t) for j, t in model if t > ts - horizon]
        model.append((i, ts))
        assert n == len(gone)
        np.testing.assert_array_equal(w.evicted_y[:n], np.array(gone, dtype=float))
        X, y = w.contents()
        np.testing.assert_array_equal(y, np.array([j for j, _ in model], dtype=float))
        np.testing.assert_array_equal(X, rows([j for j, _ in model], 2))


def test_time_window_rejects_decreasing_timestamps() -> None:
    w = TimeWindow(horizon=10.0, n_features=3)
    w.push(row(0), 0.0, ts=5.0)
    w.push(row(1), 1.0, ts=5.0)  # equal is fine
    with pytest.raises(ValueError, match="decrease"):
        w.push(row(2), 2.0, ts=4.999)
    # The rejected sample left no trace.
    np.testing.assert_array_equal(w.contents()[1], [0.0, 1.0])


@pytest.mark.parametrize("ts", [math.nan, math.inf, -math.inf])
def test_time_window_rejects_non_finite_timestamps(ts: float) -> None:
    w = TimeWindow(horizon=10.0, n_features=3)
    w.push(row(0), 0.0, ts=1.0)
    with pytest.raises(ValueError, match="finite"):
        w.push(row(1), 1.0, ts=ts)
    assert len(w) == 1


def test_time_window_default_timestamp_is_rejected() -> None:
    w = TimeWindow(horizon=10.0, n_features=3)
    with pytest.raises(ValueError):
        w.push(row(0), 0.0)


@pytest.mark.parametrize("horizon", [0.0, -1.0])
def test_time_window_rejects_non_positive_horizon(horizon: float) -> None:
    with pytest.raises(ValueError):
        TimeWindow(horizon=horizon, n_features=3)
