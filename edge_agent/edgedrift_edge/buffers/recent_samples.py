"""A device's recent samples: the newest ``capacity`` sample ids, each with the content key of its
sample (:func:`~edgedrift_edge.session.messages.content_keys`: tells a QoS-1 redelivery from a reused id) and,
while the sample is unlabeled and awaits a late label, its row ``x`` and prediction ``y_hat``.

One :class:`~edgedrift_edge.buffers.id_index.IdIndex` serves both jobs, deduplication and the join of late
labels: every sample's id goes into the index once, and the arrays parallel to its slots hold the content key,
the row, the prediction and a waiting flag. A late label joins while its sample is among the newest
``capacity`` samples (sized from the label delay: ``edgedrift.window.delay_buffer_size``); when an unlabeled
sample's id leaves the window, its row goes with it (a counted join eviction). The rows are a (slots, d)
float64 matrix (exact: a label that joins later trains on the very row that was predicted), grown with the
index's slots up to the capacity. The predictions are float32 while every one kept is exactly a float32 (a
classifier's ±1 and class codes: 4 bytes a sample less), and float64 from the first that is not (a
regressor's), so a joined label is scored against the very prediction that was published.

Memory is bounded in bytes, not only in samples (issue 30 row 8: 30k samples of 1,000 features took
234 MB): with ``max_bytes``, the window holds at most ``max_bytes // (8 d + ENTRY_BYTES)`` samples once
the width ``d`` is known, so wide samples keep fewer ids and rows (:meth:`RecentSamples.fitted`). A
device configured without ``n_features`` fits the window to the budget at its first row's width until
the session locks the device's width, and then to the budget at that width (from the capacity asked for:
a glitch of a wide first row does not shrink the window for good). Before, the window grew to its whole
capacity at the first row's width: 1.6 GB for 50,000 samples of 4,096 features, from a device stuck in
warm-up.

Before a device's width is known, warm-up rows of another width than the matrix's are kept aside in a
small dict by slot (the only per-entry Python objects, normally none), within the same byte budget (the
oldest leave first, counted as join evictions); :meth:`RecentSamples.lock_width` re-lays the rows out
once the width is decided.

Checkpoint tree: ``{"id_keys", "id_checks", "keys", "content_hash", "waiting", "X", "y_hat"}``, oldest
first; ``waiting`` is the positions (in that order) of the samples awaiting a label, ``X`` and ``y_hat``
are theirs only (``X`` as :func:`~edgedrift_edge.session.codec.pack_rows` packs rows). ``content_hash``
names the digests' scheme (:data:`~edgedrift_edge.session.messages.CONTENT_HASH`): a tree of another
scheme, or without one (written with Python's tuple hash), keeps its ids but not their digests (they become
:data:`~edgedrift_edge.session.messages.UNKNOWN_CONTENT`: a repeat of such an id counts as a redelivery).
:meth:`RecentSamples.restore_former` reads the two trees of the former separate join buffer and duplicate
window (digests dropped likewise).
"""

from __future__ import annotations

import struct
from typing import Any, cast

import numpy as np

from edgedrift.models.losses import FloatArray
from edgedrift_edge.buffers.id_index import IdIndex, IntArray, WordArray, grown, id_key
from edgedrift_edge.session.codec import pack_rows, unpack_rows
from edgedrift_edge.session.messages import CONTENT_HASH, UNKNOWN_CONTENT, SampleId

#: Bytes one sample takes besides its row: content key, prediction, flag, the index's words and links.
ENTRY_BYTES = 48


class RecentSamples:
    """Sample id -> content key for the newest ``capacity`` ids, and (x, y_hat) for those awaiting a
    label (see the module); ``max_bytes`` bounds their memory at the device's width."""

    def __init__(self, capacity: int, width: int | None = None, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        #: The capacity asked for; :attr:`capacity` is what of it fits the budget at the width.
        self.requested = capacity
        capacity = self.fitted(capacity, width, max_bytes)
        self.index = IdIndex(capacity)
        self.capacity = capacity
        #: The matrix's width: the device's width, or the first row's until it is known.
        self.width = width
        slots = self.index.slots
        self._content = np.zeros(slots, np.int64)
        self._X = np.zeros((slots, width or 0))
        self._y_hat = np.zeros(slots, np.float32)
        self._waiting = np.zeros(slots, np.bool_)
        self._views()
        self._ragged: dict[int, FloatArray] = {}
        self._ragged_bytes = 0

    def _views(self) -> None:
        self._cv = self._content.data
        self._y = cast("memoryview[float]", self._y_hat.data)
        self._w = cast("memoryview[bool]", self._waiting.data)

    def __len__(self) -> int:
        return len(self.index)

    @staticmethod
    def fitted(capacity: int, width: int | None, max_bytes: int | None) -> int:
        """The samples that fit ``max_bytes`` at ``width`` (at most ``capacity``, at least one)."""
        if width is None or max_bytes is None:
            return capacity
        return max(1, min(capacity, max_bytes // (8 * width + ENTRY_BYTES)))

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays the window holds (rows, content keys, predictions, flags, index words)."""
        index = self.index
        return int(self._X.nbytes + self._content.nbytes + self._y_hat.nbytes + self._waiting.nbytes) + int(
            index.keys.nbytes + index.checks.nbytes + 2 * index._prev.nbytes + index._table.nbytes
        )

    @property
    def waiting(self) -> int:
        """Samples awaiting a label."""
        return int(np.count_nonzero(self._waiting))

    def __contains__(self, sid: SampleId) -> bool:
        return self.index.find(*id_key(sid)) >= 0

    # --- deduplication ----------------------------------------------------------------------------------

    def get(self, sid: SampleId) -> int | None:
        """The content key last seen with ``sid``, or None when the id is not in the window."""
        return self.lookup(*id_key(sid))

    def lookup(self, key: int, check: int) -> int | None:
        """:meth:`get` by the id's words (:func:`~edgedrift_edge.buffers.id_index.id_key`)."""
        slot = self.index.find(key, check)
        return None if slot < 0 else self._cv[slot]

    def put(self, sid: SampleId, content: int) -> int:
        """``sid`` becomes the newest id, with this content key and not awaiting a label (a reused id
        drops its row); the oldest id leaves a full window. Returns the unlabeled samples evicted (0/1)."""
        return self.put_words(*id_key(sid), content)

    def put_words(self, key: int, check: int, content: int, absent: bool = False) -> int:
        """:meth:`put` by the id's words; ``absent``: the caller knows the id is not in the window."""
        index = self.index
        slot = -1 if absent else index.find(key, check)
        evicted = 0
        if slot >= 0:  # a reused id: the former sample's label can no longer join
            evicted = int(self._w[slot])
            index.renew(slot)
            self._forget(slot)
        elif len(index) >= self.capacity:
            old = index.oldest()
            evicted = int(self._w[old])
            self._forget(old)
            slot = index.replace_oldest(key, check)
        else:
            slot = index.add(key, check)
            if slot >= len(self._content):
                self._grow()
        self._cv[slot] = content
        return evicted

    def put_many(self, keys: WordArray, checks: WordArray, contents: IntArray) -> tuple[IntArray, int]:
        """:meth:`put_words` for distinct ids known to be absent, in order, in one vectorised pass: their
        slots and the unlabeled samples evicted (a batch larger than the window goes one by one, and
        then its slots are -1 for the ids its own later ids pushed out)."""
        if len(keys) > self.capacity:
            evicted = sum(
                self.put_words(key, check, content, absent=True)
                for key, check, content in zip(keys.tolist(), checks.tolist(), contents.tolist(), strict=True)
            )
            return self.index.find_many(keys, checks), evicted
        slots, gone = self.index.add_many(keys, checks)
        evicted = 0
        if len(gone):
            evicted = int(np.count_nonzero(self._waiting[gone]))
            self._waiting[gone] = False
            if self._ragged:
                for slot in gone.tolist():
                    self._unragged(slot)
        if self.index.slots > len(self._content):
            self._grow()
        self._content[slots] = contents
        return slots, evicted

    # --- samples awaiting a label -----------------------------------------------------------------------

    def remember(self, slot: int, x: FloatArray, y_hat: float) -> int:
        """The sample in ``slot`` (just put) awaits a label: keep its row and prediction. Returns the
        unlabeled samples evicted to keep the budget (the first row fits the window to its width; rows of
        another width before the device's is known)."""
        evicted = 0
        if self.width is None:
            moved, evicted = self._first_width(len(x), np.array([slot]))
            slot = int(moved[0])
            if slot < 0:  # the window kept fewer ids than it held
                return evicted + 1
        evicted += self._store(slot, x)
        if not (y_hat == 1.0 or y_hat == -1.0 or self._y_hat.itemsize == 8 or _single(y_hat)):
            self._widen()
        self._y[slot] = y_hat
        self._w[slot] = True
        return evicted

    def remember_many(self, slots: IntArray, X: FloatArray, y_hat: FloatArray) -> int:
        """:meth:`remember` for rows of the matrix's width in distinct slots, in one pass; returns the
        unlabeled samples evicted (by fitting the window to the first rows' width)."""
        evicted = 0
        if self.width is None:
            slots, evicted = self._first_width(X.shape[1], slots)
            kept = slots >= 0
            evicted += int(np.count_nonzero(~kept))
            slots, X, y_hat = slots[kept], X[kept], y_hat[kept]
        self._X[slots] = X
        if self._y_hat.itemsize == 4:
            with np.errstate(over="ignore"):
                if not np.array_equal(y_hat.astype(np.float32), y_hat, equal_nan=True):
                    self._widen()
        self._y_hat[slots] = y_hat
        self._waiting[slots] = True
        return evicted

    def _first_width(self, width: int, slots: IntArray) -> tuple[IntArray, int]:
        """The first rows fit the window to their ``width`` (:meth:`lock_width`), which may lay the ids out
        anew: the slots of the ids in ``slots`` afterwards (-1: left the window), and the evictions."""
        keys, checks = self.index.keys[slots], self.index.checks[slots]
        evicted = self.lock_width(width)
        return self.index.find_many(keys, checks), evicted

    def take(self, sid: SampleId) -> tuple[FloatArray, float] | None:
        """The row (a fresh, writable array) and prediction of ``sid`` if it awaits a label, which it no
        longer does afterwards (its id stays in the window); None otherwise."""
        slot = self.index.find(*id_key(sid))
        if slot < 0 or not self._w[slot]:
            return None
        x = self._row(slot).copy()
        y_hat = self._y[slot]
        self._forget(slot)
        return x, y_hat

    def awaits(self, sid: SampleId) -> bool:
        """True if ``sid`` is an unlabeled sample in the window."""
        slot = self.index.find(*id_key(sid))
        return slot >= 0 and bool(self._w[slot])

    def lock_width(self, width: int) -> int:
        """Rows of ``width`` go into the matrix from now on (the device's width, or its first row's until
        that is decided), and the window holds what of the capacity asked for fits the byte budget at that
        width; returns the unlabeled samples it evicted."""
        evicted = 0
        if width != self.width:
            slots = np.flatnonzero(self._waiting).tolist()
            rows = {slot: self._row(slot).copy() for slot in slots}
            self.width, self._X = width, np.zeros((len(self._content), width))
            self._ragged, self._ragged_bytes = {}, 0
            for slot, row in rows.items():
                evicted += self._store(slot, row)
        fitted = self.fitted(self.requested, width, self.max_bytes)
        if fitted == self.capacity:
            return evicted
        requested = self.requested
        refitted, dropped = RecentSamples.restore(self.snapshot(), fitted, width, self.max_bytes)
        vars(self).update(vars(refitted))
        self.requested = requested
        return evicted + dropped

    def _widen(self) -> None:
        """A prediction that float32 does not hold exactly: the predictions become float64 from now on."""
        self._y_hat = self._y_hat.astype(np.float64)
        self._views()

    def _forget(self, slot: int) -> None:
        """``slot`` no longer awaits a label."""
        if self._w[slot]:
            self._w[slot] = False
            if self._ragged:
                self._unragged(slot)

    def _unragged(self, slot: int) -> None:
        row = self._ragged.pop(slot, None)
        if row is not None:
            self._ragged_bytes -= row.nbytes

    def _store(self, slot: int, x: FloatArray) -> int:
        """Keep ``x`` for ``slot``: in the matrix, or aside if of another width (within the byte budget:
        the oldest rows aside leave first); returns the unlabeled samples that left for it."""
        assert self.width is not None
        if len(x) == self.width:
            self._X[slot] = x
            if self._ragged:
                self._unragged(slot)
            return 0
        self._unragged(slot)
        row = self._ragged[slot] = np.array(x, dtype=np.float64)
        self._ragged_bytes += row.nbytes
        evicted = 0
        while self.max_bytes is not None and self._ragged_bytes > self.max_bytes and len(self._ragged) > 1:
            oldest = next(iter(self._ragged))
            self._unragged(oldest)
            self._w[oldest] = False
            evicted += 1
        return evicted

    def _grow(self) -> None:
        """The arrays grow with the index's slots."""
        slots = self.index.slots
        self._content, self._X = grown(self._content, slots), grown(self._X, slots)
        self._y_hat, self._waiting = grown(self._y_hat, slots), grown(self._waiting, slots)
        self._views()

    def _row(self, slot: int) -> FloatArray:
        row = self._ragged.get(slot) if self._ragged else None
        return self._X[slot] if row is None else row

    # --- checkpoints ------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The ids and their content keys, oldest first, and the rows and predictions of those awaiting a
        label, as a few arrays."""
        order = self.index.order()
        waiting = np.flatnonzero(self._waiting[order])
        slots = order[waiting]
        if self._ragged:
            X: FloatArray | list[FloatArray] = pack_rows([self._row(slot) for slot in slots.tolist()])
        elif self.width is None:
            X = np.zeros((0, 0))
        else:
            X = self._X[slots]
        return {
            "id_keys": self.index.keys[order],
            "id_checks": self.index.checks[order],
            "keys": self._content[order],
            "content_hash": CONTENT_HASH,
            "waiting": waiting,
            "X": X,
            "y_hat": self._y_hat[slots].astype(np.float64),
        }

    @classmethod
    def restore(
        cls, tree: dict[str, Any], capacity: int, width: int | None, max_bytes: int | None = None
    ) -> tuple[RecentSamples, int]:
        """A window of ``capacity`` (within ``max_bytes``) with the newest ids of a :meth:`snapshot`, and
        the number of unlabeled samples left out (older than the window)."""
        keys, checks = tree["id_keys"].tolist(), tree["id_checks"].tolist()
        window = cls(capacity, width, max_bytes)
        window._put_all(keys, checks, _contents(tree))
        dropped = window._remember_all(
            [(keys[i], checks[i]) for i in tree["waiting"].tolist()], unpack_rows(tree["X"]), tree["y_hat"]
        )
        return window, dropped

    @classmethod
    def restore_former(
        cls,
        joins: dict[str, Any],
        recent_ids: dict[str, Any],
        capacity: int,
        width: int | None,
        max_bytes: int | None = None,
    ) -> tuple[RecentSamples, int]:
        """A window from the former separate trees: the duplicate window's ids and content keys
        (``{"id_keys", "id_checks", "keys"}``, or ``{"ids", "keys"}``) and the join buffer's entries
        (``{"id_keys", "id_checks", "X", "y_hat"}``, or ``{"ids", "X", "y_hat"}``); an entry whose id is not
        among the newest ``capacity`` ids counts as left out."""
        window = cls(capacity, width, max_bytes)
        window._put_all(*_words(recent_ids), _contents(recent_ids))
        join_keys, join_checks = _words(joins)
        dropped = window._remember_all(
            list(zip(join_keys, join_checks, strict=True)), unpack_rows(joins["X"]), joins["y_hat"]
        )
        return window, dropped

    def _put_all(self, keys: list[int], checks: list[int], contents: list[int]) -> None:
        for key, check, content in zip(keys, checks, contents, strict=True):
            self.put_words(key, check, content)

    def _remember_all(self, words: list[tuple[int, int]], rows: list[FloatArray], y_hat: FloatArray) -> int:
        """Mark these ids as awaiting a label with their rows; returns how many left the window."""
        dropped = 0
        for (key, check), x, p in zip(words, rows, y_hat.tolist(), strict=True):
            slot = self.index.find(key, check)
            if slot < 0:
                dropped += 1
            else:
                dropped += self.remember(slot, x, p)
        return dropped


def _contents(tree: dict[str, Any]) -> list[int]:
    """A tree's content digests, or :data:`UNKNOWN_CONTENT` for each where they are of another scheme."""
    if tree.get("content_hash") == CONTENT_HASH:
        return cast(list[int], tree["keys"].tolist())
    return [UNKNOWN_CONTENT] * len(tree["keys"])


def _words(tree: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The id words of a former tree: ``id_keys``/``id_checks``, or ``ids`` as the OrderedDicts wrote them."""
    if "ids" in tree:
        words = [id_key(sid) for sid in tree["ids"]]
        return [k for k, _ in words], [c for _, c in words]
    return tree["id_keys"].tolist(), tree["id_checks"].tolist()


def _single(value: float) -> bool:
    """Whether ``value`` is exactly a float32 (NaN included)."""
    try:
        return value != value or cast(float, struct.unpack("f", struct.pack("f", value))[0]) == value
    except OverflowError:
        return False
