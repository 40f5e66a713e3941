"""A warming device's first-window rows, packed as bytes: exact values of any width, oldest dropped
first, each read back as a fresh writable array."""

from __future__ import annotations

import numpy as np

from edgedrift_edge.buffers.packed_rows import PackedRows


def test_rows_come_back_bit_exact_in_order_whatever_their_width() -> None:
    rows = [np.array([0.1, -2.5e300, np.nan]), np.array([1.0, 2.0]), np.arange(5, dtype=np.float64)]
    packed = PackedRows(rows)
    packed.append(np.array([7, 8, 9]))  # ints are stored as float64
    out = list(packed)
    assert len(packed) == 4 and [len(r) for r in out] == [3, 2, 5, 3]
    for got, want in zip(out[:3], rows, strict=True):
        assert got.dtype == np.float64 and got.tobytes() == want.tobytes()
    assert out[3].tolist() == [7.0, 8.0, 9.0]
    out[0][0] = 99.0
    assert next(iter(packed))[0] == 0.1, "a row read back is a copy: writing it changes nothing kept"


def test_drop_oldest_keeps_the_newest() -> None:
    packed = PackedRows(np.full(2, float(i)) for i in range(10))
    packed.drop_oldest(7)
    assert [r[0] for r in packed] == [7.0, 8.0, 9.0]
