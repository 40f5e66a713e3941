"""A device's first-window rows while it warms up, each kept as the bytes of its float64 values (about
75 B for d = 5, where a small numpy array costs ~160 B in two allocations). A gateway warms a thousand
devices at once, and the freed arrays left the heap fragmented for good."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from edgedrift.models.losses import FloatArray


class PackedRows:
    """A list of rows of any widths: ``append``, ``len``, ``drop_oldest``, iteration as fresh arrays."""

    __slots__ = ("_raw",)

    def __init__(self, rows: Iterable[FloatArray] = ()) -> None:
        self._raw = [np.asarray(row, dtype=np.float64).tobytes() for row in rows]

    def append(self, row: FloatArray) -> None:
        self._raw.append(np.asarray(row, dtype=np.float64).tobytes())

    def __len__(self) -> int:
        return len(self._raw)

    def drop_oldest(self, n: int) -> None:
        del self._raw[:n]

    def __iter__(self) -> Iterator[FloatArray]:
        """Each row as a fresh, writable float64 array."""
        for raw in self._raw:
            yield np.frombuffer(raw).copy()
