"""Sliding windows over labeled samples: count-based and time-based, on a preallocated ring buffer.

``push`` returns how many samples it evicted and leaves them in ``evicted_X`` / ``evicted_y`` (valid until
the next push), so a monitor can update Δg in O(d) per evicted sample without any allocation.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from edgedrift.models.losses import FloatArray


def delay_buffer_size(
    rate_per_s: float, max_delay_s: float, headroom: float = 1.5, minimum: int = 64, maximum: int = 1_000_000
) -> int:
    """Entries a per-device buffer of samples awaiting their label (or of recent sample ids) needs: the
    samples that arrive within the longest label delay, times ``headroom`` for bursts, within
    [minimum, maximum]; a buffer sized from the delay instead of a fixed 100k keeps idle devices small.

    >>> delay_buffer_size(rate_per_s=10.0, max_delay_s=60.0)
    900
    """
    if not (rate_per_s >= 0.0 and max_delay_s >= 0.0 and headroom >= 1.0):
        raise ValueError("rate_per_s and max_delay_s must be >= 0 and headroom >= 1")
    need = math.ceil(rate_per_s * max_delay_s * headroom)
    return int(min(max(need, minimum), maximum))


class _RingWindow:
    """Chronological ring buffer of (x, y, ts); the subclasses decide what to evict."""

    def __init__(self, n_features: int, capacity: int) -> None:
        if n_features < 1 or capacity < 1:
            raise ValueError("n_features and capacity must be >= 1")
        self.n_features = n_features
        self._X = np.empty((capacity, n_features))
        self._y = np.empty(capacity)
        self._ts = np.empty(capacity)
        self._start = 0
        self._size = 0
        self.evicted_X = np.empty((1, n_features))
        self.evicted_y = np.empty(1)
        self.n_pushed = 0

    @property
    def capacity(self) -> int:
        return int(self._X.shape[0])

    def __len__(self) -> int:
        return self._size

    def _ensure_evicted(self, k: int) -> None:
        if k > self.evicted_y.size:
            self.evicted_X = np.empty((max(k, 2 * self.evicted_y.size), self.n_features))
            self.evicted_y = np.empty(self.evicted_X.shape[0])

    def _evict_oldest(self, k: int) -> None:
        """Move the k oldest samples into the evicted buffers and drop them."""
        self._ensure_evicted(k)
        idx = (self._start + np.arange(k)) % self.capacity if k > 1 else self._start
        self.evicted_X[:k] = self._X[idx]
        self.evicted_y[:k] = self._y[idx]
        self._start = (self._start + k) % self.capacity
        self._size -= k

    def _append(self, x: FloatArray, y: float, ts: float) -> None:
        i = (self._start + self._size) % self.capacity
        self._X[i] = x
        self._y[i] = y
        self._ts[i] = ts
        self._size += 1
        self.n_pushed += 1

    def _append_many(self, X: FloatArray, y: FloatArray, ts: FloatArray) -> None:
        """Append rows that fit (the caller made room), wrapping around the ring."""
        k = len(y)
        idx = (self._start + self._size + np.arange(k)) % self.capacity
        self._X[idx] = X
        self._y[idx] = y
        self._ts[idx] = ts
        self._size += k
        self.n_pushed += k

    def last(self, k: int) -> tuple[FloatArray, FloatArray]:
        """Copies of the newest k samples (oldest first)."""
        k = min(k, self._size)
        idx = (self._start + self._size - k + np.arange(k)) % self.capacity
        return self._X[idx], self._y[idx]

    def _order(self) -> NDArray[np.intp] | slice:
        end = self._start + self._size
        if end <= self.capacity:
            return slice(self._start, end)
        return np.concatenate([np.arange(self._start, self.capacity), np.arange(end - self.capacity)])

    def contents(self) -> tuple[FloatArray, FloatArray]:
        """Copies of the samples (oldest first), ready to ship to a batch trainer."""
        order = self._order()
        return self._X[order].copy(), self._y[order].copy()

    def timestamps(self) -> FloatArray:
        return self._ts[self._order()].copy()

    def clear(self) -> None:
        self._start = 0
        self._size = 0

    def keep_last(self, k: int) -> None:
        """Drop all but the newest k samples (a window restart after a detected change)."""
        drop = self._size - max(0, min(k, self._size))
        self._start = (self._start + drop) % self.capacity
        self._size -= drop


class CountWindow(_RingWindow):
    """The last ``size`` labeled samples (the paper's window of 2000 samples = 200 labels at 10%)."""

    def __init__(self, size: int, n_features: int) -> None:
        super().__init__(n_features, size)
        self.size = size

    @property
    def is_full(self) -> bool:
        return self._size == self.size

    def push(self, x: FloatArray, y: float, ts: float = math.nan) -> int:
        """Add a sample; evict the oldest one when full. Returns the number evicted (0 or 1)."""
        if self._size < self.size:
            self._append(x, y, ts)
            return 0
        # Full (the ring's capacity is the size): the new sample takes the oldest one's place.
        s = self._start
        self.evicted_X[0] = self._X[s]
        self.evicted_y[0] = self._y[s]
        self._X[s] = x
        self._y[s] = y
        self._ts[s] = ts
        self._start = (s + 1) % self.size
        self.n_pushed += 1
        return 1

    def push_many(self, X: FloatArray, y: FloatArray, ts: FloatArray | None = None) -> int:
        """Add k samples in order; returns how many were evicted (oldest first in ``evicted_X``).

        When k exceeds the free room, the oldest samples go first, including, when k > size, the first
        new ones, exactly as k calls of :meth:`push` would.
        """
        k = len(y)
        ts_arr = np.full(k, math.nan) if ts is None else np.asarray(ts, dtype=np.float64)
        n_ev = max(0, self._size + k - self.size)
        if n_ev:
            self._ensure_evicted(n_ev)
            old = min(n_ev, self._size)
            self._evict_oldest(old)
            self.evicted_X[old:n_ev] = X[: n_ev - old]
            self.evicted_y[old:n_ev] = y[: n_ev - old]
        keep = slice(max(0, k - self.size), k)
        self._append_many(X[keep], y[keep], ts_arr[keep])
        self.n_pushed += k - (keep.stop - keep.start)
        return n_ev


class TimeWindow(_RingWindow):
    """Labeled samples whose timestamp is within ``horizon`` of the newest one (ts > t_new − horizon).

    The buffer starts at ``initial_capacity`` and doubles when a burst of samples needs more room.
    Timestamps must not decrease.
    """

    def __init__(self, horizon: float, n_features: int, initial_capacity: int = 1024) -> None:
        if horizon <= 0:
            raise ValueError("horizon must be > 0")
        super().__init__(n_features, initial_capacity)
        self.horizon = horizon
        self._last_ts = -math.inf

    def push(self, x: FloatArray, y: float, ts: float = math.nan) -> int:
        """Add a sample with timestamp ``ts``; returns how many expired samples were evicted."""
        if not math.isfinite(ts):
            raise ValueError("a time-based window needs a finite timestamp")
        if ts < self._last_ts:
            raise ValueError(f"timestamps must not decrease ({ts} < {self._last_ts})")
        self._last_ts = ts
        cutoff = ts - self.horizon
        k = 0
        while k < self._size and self._ts[(self._start + k) % self.capacity] <= cutoff:
            k += 1
        if k:
            self._evict_oldest(k)
        if self._size == self.capacity:
            self._grow()
        self._append(x, y, ts)
        return k

    def push_many(self, X: FloatArray, y: FloatArray, ts: FloatArray | None = None) -> int:
        """Add k timestamped samples; returns how many expired (old ones first, then expired new ones)."""
        if ts is None:
            raise ValueError("a time-based window needs timestamps")
        ts = np.asarray(ts, dtype=np.float64)
        if len(ts) == 0:
            return 0
        if not np.all(np.isfinite(ts)):
            raise ValueError("a time-based window needs finite timestamps")
        if ts[0] < self._last_ts or np.any(np.diff(ts) < 0):
            raise ValueError("timestamps must not decrease")
        self._last_ts = float(ts[-1])
        cutoff = self._last_ts - self.horizon
        old_ts = self._ts[self._order()]
        k_old = int(np.searchsorted(old_ts, cutoff, side="right"))
        k_new = int(np.searchsorted(ts, cutoff, side="right"))
        self._ensure_evicted(k_old + k_new)
        if k_old:
            self._evict_oldest(k_old)
        self.evicted_X[k_old : k_old + k_new] = X[:k_new]
        self.evicted_y[k_old : k_old + k_new] = y[:k_new]
        while self._size + len(y) - k_new > self.capacity:
            self._grow()
        self._append_many(X[k_new:], y[k_new:], ts[k_new:])
        self.n_pushed += k_new
        return k_old + k_new

    def _grow(self) -> None:
        order = self._order()
        cap = 2 * self.capacity
        X, y, ts = np.empty((cap, self.n_features)), np.empty(cap), np.empty(cap)
        X[: self._size], y[: self._size], ts[: self._size] = self._X[order], self._y[order], self._ts[order]
        self._X, self._y, self._ts, self._start = X, y, ts, 0
