"""The recent scores of a device's labeled predictions (1.0/0.0 hits, or squared errors): the newest
``maxlen`` in a float64 ring that starts small and doubles up to ``maxlen``, so a gateway's thousand
devices hold 8 bytes per score instead of a deque's ~32 (a float object and its pointer)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from edgedrift.models.losses import FloatArray

#: Scores allocated at first; the ring doubles as they arrive.
_FIRST = 64


class ScoreWindow:
    """The newest ``maxlen`` scores, oldest first (see the module)."""

    __slots__ = ("_buf", "_n", "_start", "maxlen")

    def __init__(self, maxlen: int, values: Iterable[float] = ()) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be at least 1")
        self.maxlen = maxlen
        self._buf = np.zeros(min(maxlen, _FIRST))
        self._n = 0
        self._start = 0
        for v in values:
            self.push(v)

    def __len__(self) -> int:
        return self._n

    def push(self, score: float) -> float | None:
        """Add ``score`` as the newest; returns the oldest score it replaced in a full window, else None."""
        buf = self._buf
        if self._n == self.maxlen:
            old = float(buf[self._start])
            buf[self._start] = score
            self._start = (self._start + 1) % self.maxlen
            return old
        if self._n == len(buf):
            self._buf = buf = np.concatenate([buf, np.zeros(min(self.maxlen, 2 * len(buf)) - len(buf))])
        buf[self._n] = score
        self._n += 1
        return None

    def values(self) -> FloatArray:
        """The scores, oldest first (a copy)."""
        return np.roll(self._buf[: self._n], -self._start)
