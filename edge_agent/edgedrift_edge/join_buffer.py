"""The join buffer: unlabeled samples (their row ``x`` and prediction ``y_hat``) awaiting a late label,
at most ``capacity`` of them, the oldest evicted first. Arrays indexed by an
:class:`~edgedrift_edge.id_index.IdIndex` slot, grown with the index's slots up to the capacity: a
(slots, d) float64 matrix of rows (exact: a label that joins later trains on the very row that was
predicted) and a float64 vector of predictions.

Before a device's width is known, warm-up rows of another width than the matrix's are kept aside in a
small dict by slot (the only per-entry Python objects, normally none); :meth:`JoinBuffer.lock_width`
re-lays the buffer out once the width is decided.

Checkpoint tree: ``{"id_keys", "id_checks", "X", "y_hat"}``, oldest first (``X`` as
:func:`~edgedrift_edge.session_codec.pack_rows` packs rows). :meth:`JoinBuffer.restore` also reads the
former ``{"ids", "X", "y_hat"}`` (ids as written by the OrderedDict buffer).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from edgedrift.models.losses import FloatArray
from edgedrift_edge.id_index import IdIndex, WordArray, grown, id_key
from edgedrift_edge.messages import SampleId
from edgedrift_edge.session_codec import pack_rows, unpack_rows


class JoinBuffer:
    """Sample id -> (x, y_hat) for unlabeled samples, in arrival order, bounded (see the module)."""

    def __init__(self, capacity: int, width: int | None = None) -> None:
        self.index = IdIndex(capacity)
        self.capacity = capacity
        #: The matrix's width: the device's width, or the first row's until it is known.
        self.width = width
        self._X = np.zeros((self.index.slots, width or 0))
        self._y_hat = np.zeros(self.index.slots)
        self._y = cast("memoryview[float]", self._y_hat.data)
        self._ragged: dict[int, FloatArray] = {}

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, sid: SampleId) -> bool:
        return self.index.find(*id_key(sid)) >= 0

    def push(self, sid: SampleId, x: FloatArray, y_hat: float) -> int:
        """Keep ``x`` and ``y_hat`` under ``sid`` (a known id keeps its place, with the new values) and
        evict the oldest entry when full; returns the number evicted (0 or 1)."""
        return self.push_words(*id_key(sid), x, y_hat)

    def push_many(self, keys: WordArray, checks: WordArray, X: FloatArray, y_hat: FloatArray) -> int:
        """:meth:`push` for many samples in order (their ids as words); returns the number evicted. New,
        distinct ids of the buffer's width go in one vectorised pass, anything else one by one."""
        index = self.index
        simple = (
            not self._ragged
            and X.shape[1] == self.width
            and len(keys) <= self.capacity
            and np.unique(keys).size == len(keys)
            and bool((index.find_many(keys, checks) < 0).all())
        )
        if not simple:
            return sum(
                self.push_words(key, check, x, p)
                for key, check, x, p in zip(keys.tolist(), checks.tolist(), X, y_hat.tolist(), strict=True)
            )
        slots, gone = index.add_many(keys, checks)
        if index.slots > len(self._y_hat):
            self._X, self._y_hat = grown(self._X, index.slots), grown(self._y_hat, index.slots)
            self._y = cast("memoryview[float]", self._y_hat.data)
        self._X[slots] = X
        self._y_hat[slots] = y_hat
        return len(gone)

    def push_words(self, key: int, check: int, x: FloatArray, y_hat: float) -> int:
        """:meth:`push` by the id's words (:func:`~edgedrift_edge.id_index.id_key`)."""
        index = self.index
        slot = index.find(key, check)
        evicted = 0
        if slot < 0:
            if len(index) >= self.capacity:
                if self._ragged:
                    self._ragged.pop(index.oldest(), None)
                slot = index.replace_oldest(key, check)
                evicted = 1
            else:
                slot = self._add(key, check)
        self._store(slot, x)
        self._y[slot] = y_hat
        return evicted

    def pop(self, sid: SampleId) -> tuple[FloatArray, float] | None:
        """Remove ``sid``'s entry and return its row (a fresh, writable array) and prediction, or None."""
        slot = self.index.find(*id_key(sid))
        if slot < 0:
            return None
        x = self._row(slot).copy()
        y_hat = self._y[slot]
        self._drop(slot)
        return x, y_hat

    def lock_width(self, width: int) -> None:
        """The device's width is decided: rows of that width go into the matrix from now on."""
        if width == self.width:
            return
        order = self.index.order().tolist()
        rows = {slot: self._row(slot).copy() for slot in order}
        self.width, self._X, self._ragged = width, np.zeros((len(self._y_hat), width)), {}
        for slot, row in rows.items():
            self._store(slot, row)

    def _store(self, slot: int, x: FloatArray) -> None:
        if self.width is None:
            self.width, self._X = len(x), np.zeros((len(self._y_hat), len(x)))
        if len(x) == self.width:
            self._X[slot] = x
            if self._ragged:
                self._ragged.pop(slot, None)
        else:
            self._ragged[slot] = np.array(x, dtype=np.float64)

    def _add(self, key: int, check: int) -> int:
        """Add an id to the index; the arrays grow with its slots."""
        slot = self.index.add(key, check)
        if slot >= len(self._y_hat):
            self._X, self._y_hat = grown(self._X, self.index.slots), grown(self._y_hat, self.index.slots)
            self._y = cast("memoryview[float]", self._y_hat.data)
        return slot

    def _row(self, slot: int) -> FloatArray:
        row = self._ragged.get(slot) if self._ragged else None
        return self._X[slot] if row is None else row

    def _drop(self, slot: int) -> None:
        self.index.remove(slot)
        if self._ragged:
            self._ragged.pop(slot, None)

    # --- checkpoints ------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The entries, oldest first, as a few arrays."""
        order = self.index.order()
        if self._ragged:
            X: FloatArray | list[FloatArray] = pack_rows([self._row(slot) for slot in order.tolist()])
        elif self.width is None:
            X = np.zeros((0, 0))
        else:
            X = self._X[order]
        return {
            "id_keys": self.index.keys[order],
            "id_checks": self.index.checks[order],
            "X": X,
            "y_hat": self._y_hat[order],
        }

    @classmethod
    def restore(cls, tree: dict[str, Any], capacity: int, width: int | None) -> tuple[JoinBuffer, int]:
        """A buffer of ``capacity`` with the newest entries of a :meth:`snapshot` (or of the former
        format) that fit, and the number of older entries left out."""
        if "ids" in tree:
            words = [id_key(sid) for sid in tree["ids"]]
            keys, checks = [k for k, _ in words], [c for _, c in words]
        else:
            keys, checks = tree["id_keys"].tolist(), tree["id_checks"].tolist()
        rows, y_hat = unpack_rows(tree["X"]), tree["y_hat"].tolist()
        buffer = cls(capacity, width)
        dropped = max(0, len(keys) - capacity)
        index = buffer.index
        for key, check, x, p in zip(
            keys[dropped:], checks[dropped:], rows[dropped:], y_hat[dropped:], strict=True
        ):
            slot = index.find(key, check)
            if slot < 0:
                slot = buffer._add(key, check)
            buffer._store(slot, x)
            buffer._y[slot] = p
        return buffer, dropped
