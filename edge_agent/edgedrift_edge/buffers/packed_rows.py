"""A device's first-window rows while it warms up, packed one after another into one ``bytearray`` of
float64 values with their widths beside them. A gateway warms a thousand devices at once: a numpy array
per row (~160 B in two allocations) or a ``bytes`` object per row left Python's small-object arenas
pinned by the survivors of that burst for good (docs/benchmarks.md, "Memory of the gateway processes");
one growing buffer per device is one heap allocation that is freed whole."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator

import numpy as np

from edgedrift.models.losses import FloatArray

#: Bytes of one value.
_VALUE = 8


class PackedRows:
    """A list of rows of any widths: ``append``, ``len``, ``drop_oldest``, iteration as fresh arrays."""

    __slots__ = ("_raw", "_widths")

    def __init__(self, rows: Iterable[FloatArray] = ()) -> None:
        self._raw = bytearray()
        self._widths = array("l")
        for row in rows:
            self.append(row)

    def append(self, row: FloatArray) -> None:
        values = np.ascontiguousarray(row, dtype=np.float64).ravel()
        self._raw += values.data.cast("B")
        self._widths.append(values.size)

    def __len__(self) -> int:
        return len(self._widths)

    @property
    def widths(self) -> np.ndarray[tuple[int], np.dtype[np.int64]]:
        """Each row's width, oldest first (a copy)."""
        return np.array(self._widths, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        """Bytes of the values held."""
        return len(self._raw)

    @property
    def last_nbytes(self) -> int:
        """Bytes of the newest row (0 when empty)."""
        return _VALUE * self._widths[-1] if self._widths else 0

    def over(self, max_bytes: int) -> int:
        """How many of the oldest rows must go for the rest to fit ``max_bytes`` (the newest row stays)."""
        excess = len(self._raw) - max_bytes
        if excess <= 0:
            return 0
        n = int(np.searchsorted(np.cumsum(self.widths) * _VALUE, excess)) + 1
        return min(n, len(self._widths) - 1)

    def drop_oldest(self, n: int) -> None:
        n = min(n, len(self._widths))
        del self._raw[: _VALUE * sum(self._widths[:n])]
        del self._widths[:n]

    def __iter__(self) -> Iterator[FloatArray]:
        """Each row as a fresh, writable float64 array."""
        offset = 0
        for width in self._widths.tolist():
            yield np.frombuffer(self._raw, np.float64, width, offset).copy()
            offset += _VALUE * width
