"""Sample ids in preallocated numpy arrays: an insertion-ordered index of at most ``capacity`` ids, each
in a fixed slot, so a gateway's per-device buffers cost a few bytes per entry instead of the ~150 B of
an ``OrderedDict`` entry (and do not grow under insert/evict churn).

An id is stored as two 64-bit words (:func:`id_key`). An int that fits in int64 is itself (exact), with a
check word of 0; a string, or an int beyond int64, is a 128-bit BLAKE2b digest of a tagged encoding
whose check word is odd, so it never equals an int's and ``1`` and ``"1"`` stay distinct. Two distinct
string ids are confused only if their 128-bit digests agree: for a lookup against ``n`` stored ids the
probability is about ``n / 2**127`` (below 1e-32 for a million ids), which we treat as impossible.

Layout: a pool of ``capacity`` slots (key and check words, and a doubly linked list in age order through
integer arrays, so removing or renewing any entry is O(1) and slots never move) and an open-addressing
hash table (linear probing, backward-shift deletion) from id to slot. The links and the table hold
``slot + 1``, so an index of fewer than 32,767 ids (a gateway's buffers) keeps them in ``int16``; the
check words of an index that only ever saw int ids are all zero and share one read-only array (copied
when the first string id arrives), so a gateway's thousand devices do not each hold a vector of zeros.
The slot arrays grow by doubling up to the capacity and the table up to twice the capacity, so a large
capacity (a single device's 100,000 ids, or a gateway configured with large buffers) costs memory only
as it fills; :attr:`IdIndex.slots` says how many slots are allocated, so that callers grow their parallel
arrays with it.
Scalars go through the arrays' ``memoryview`` (``.data``): no per-entry Python objects. Where
:mod:`edgedrift.kernels` is built, the hash table's probing (find, place, backward-shift delete) runs
compiled (``id_find`` … ``id_unplace``), and a batch of new ids is placed id by id there instead of
rebuilding the table; the Python code below stays the reference (``tests/unit/test_id_index.py`` runs
both).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import numpy.typing as npt

from edgedrift import kernels
from edgedrift_edge.session.messages import SampleId

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_WORD = (1 << 64) - 1
#: Fibonacci hashing: the multiplier spreads sequential ids over the table.
_GOLDEN = 0x9E3779B97F4A7C15
#: The smallest hash table (slots); it doubles while more than half full, up to 2 * capacity.
_MIN_TABLE = 1024
#: Slots allocated at first (a small buffer is allocated whole: growing it would cost more in freed
#: fragments than it saves); they double as ids arrive, up to the capacity.
_MIN_SLOTS = 1024

IntArray = npt.NDArray[np.int64]
WordArray = npt.NDArray[np.uint64]
#: :meth:`IdIndex.add_many` rebuilds the whole table, vectorised, when it has at most this many entries
#: per id added (a gateway's 900-id buffers with batches of 100); a larger table takes the ids one by one.
_REBUILD_PER_ID = 64
#: Read-only zero check words by length, shared by every index that holds only int ids.
_ZERO_CHECKS: dict[int, npt.NDArray[np.uint64]] = {}


def _zero_checks(slots: int) -> npt.NDArray[np.uint64]:
    zeros = _ZERO_CHECKS.get(slots)
    if zeros is None:
        zeros = _ZERO_CHECKS[slots] = np.zeros(slots, np.uint64)
        zeros.flags.writeable = False
    return zeros


def id_key(sid: SampleId) -> tuple[int, int]:
    """The (key, check) words of a sample id (see the module docstring)."""
    if not isinstance(sid, str) and _INT64_MIN <= sid <= _INT64_MAX:
        return sid & _WORD, 0
    raw = b"s" + sid.encode("utf-8", "surrogatepass") if isinstance(sid, str) else b"i%d" % sid
    digest = hashlib.blake2b(raw, digest_size=16).digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little") | 1


def distinct(keys: WordArray) -> bool:
    """True if no word repeats: checked by their rise first (sample ids mostly rise), sorted otherwise."""
    return bool((keys[1:] > keys[:-1]).all()) or np.unique(keys).size == len(keys)


def grown(array: npt.NDArray[Any], rows: int) -> npt.NDArray[Any]:
    """A copy of ``array`` with ``rows`` rows, the new ones zero."""
    out = np.zeros((rows, *array.shape[1:]), array.dtype)
    out[: len(array)] = array
    return out


def _runs(home: IntArray) -> IntArray:
    """Linear probing's positions of ids sorted by home, without wrapping: each at its home or right
    after the one before, whichever is later (``max(home[i], pos[i - 1] + 1)`` as one running maximum)."""
    step = np.arange(home.size)
    return np.asarray(np.maximum.accumulate(home - step) + step, np.int64)


def _table_size(entries: int) -> int:
    """Slots for ``entries`` ids at most half full (a power of two)."""
    size = _MIN_TABLE
    while size < 2 * entries:
        size *= 2
    return size


class IdIndex:
    """At most ``capacity`` ids in age order, each in a slot in ``[0, capacity)`` that the caller uses to
    index its own parallel arrays. The caller evicts (:meth:`oldest`, :meth:`remove`) before it adds to
    a full index."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        #: Slots allocated (callers' parallel arrays need this many rows); grows up to ``capacity``.
        self.slots = min(capacity, _MIN_SLOTS)
        #: ``slot + 1`` fits in it (the links' and the table's entries).
        self._int = np.int16 if capacity < np.iinfo(np.int16).max else np.int32
        #: The key and check words of each slot (meaningful for slots in use); ``checks`` is a shared
        #: read-only zero array until a string id arrives.
        self.keys = np.zeros(self.slots, np.uint64)
        self.checks = _zero_checks(self.slots)
        # Age order: slot + 1 of the previous / next entry, 0 for none; free slots chain through _next.
        self._prev = np.zeros(self.slots, self._int)
        self._next = np.zeros(self.slots, self._int)
        self._views()
        self._head = self._tail = -1
        self._size = 0
        self._fresh = 0  # slots [fresh, capacity) were never used
        self._free = -1  # the last released slot (a stack chained through _next)
        self._max_table = _table_size(capacity)
        self._alloc_table(min(_MIN_TABLE, self._max_table))
        #: The compiled probing (None: the Python code below).
        self._kern = kernels.MODULE

    def _views(self) -> None:
        self._k, self._c = self.keys.data, self.checks.data
        self._p, self._n = self._prev.data, self._next.data

    def _grow_slots(self) -> None:
        """Double the slot arrays (up to the capacity); slots keep their numbers."""
        self.slots = min(self.capacity, 2 * self.slots)
        self.keys = grown(self.keys, self.slots)
        owned = self.checks.flags.writeable
        self.checks = grown(self.checks, self.slots) if owned else _zero_checks(self.slots)
        self._prev, self._next = grown(self._prev, self.slots), grown(self._next, self.slots)
        self._views()

    def _alloc_table(self, size: int) -> None:
        self._table = np.zeros(size, self._int)  # slot + 1; 0 = empty
        self._t = self._table.data
        self._shift = 64 - (size.bit_length() - 1)
        self._mask = size - 1

    def __len__(self) -> int:
        return self._size

    def find(self, key: int, check: int) -> int:
        """The slot of the id with these words, or -1."""
        if self._kern is not None:
            return int(self._kern.id_find(self._table, self.keys, self.checks, key, check, self._shift))
        t, k, c, mask = self._t, self._k, self._c, self._mask
        pos = (((key ^ check) * _GOLDEN) & _WORD) >> self._shift
        while True:
            s = t[pos]
            if s == 0:
                return -1
            if k[s - 1] == key and c[s - 1] == check:
                return s - 1
            pos = (pos + 1) & mask

    def find_many(self, keys: WordArray, checks: WordArray) -> IntArray:
        """:meth:`find` for many ids at once (vectorised probing): their slots, -1 where absent."""
        if self._kern is not None:
            found = np.empty(len(keys), np.int64)
            self._kern.id_find_many(
                self._table,
                self.keys,
                self.checks,
                np.ascontiguousarray(keys, np.uint64),
                np.ascontiguousarray(checks, np.uint64),
                self._shift,
                found,
            )
            return found
        table, mask = self._table, self._mask
        pos = (((keys ^ checks) * np.uint64(_GOLDEN)) >> np.uint64(self._shift)).astype(np.int64)
        out = np.full(len(keys), -1, np.int64)
        todo = np.arange(len(keys))
        while todo.size:
            s = table[pos[todo]].astype(np.int64) - 1
            hit = s >= 0
            same = hit.copy()
            same[hit] = (self.keys[s[hit]] == keys[todo[hit]]) & (self.checks[s[hit]] == checks[todo[hit]])
            out[todo[same]] = s[same]
            todo = todo[hit & ~same]
            pos[todo] = (pos[todo] + 1) & mask
        return out

    def add_many(self, keys: WordArray, checks: WordArray) -> tuple[IntArray, IntArray]:
        """Add distinct ids that are not in the index as the newest, in order, the oldest ids leaving a
        full index first: ``(slots of the new ids, slots evicted)`` (an evicted slot is reused). The same
        index as adding them one by one with :meth:`add` / :meth:`replace_oldest`; a small table is
        rebuilt in one vectorised pass instead of probing per id (the compiled probing places the new
        ids one by one in one call)."""
        k = len(keys)
        if k > self.capacity:
            raise OverflowError("more ids than the index holds")
        if k == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if self._kern is None and (self._mask + 1) > _REBUILD_PER_ID * k:
            added: list[int] = []
            left: list[int] = []
            for key, check in zip(keys.tolist(), checks.tolist(), strict=True):
                if self._size >= self.capacity:
                    left.append(self._head)
                    added.append(self.replace_oldest(key, check))
                else:
                    added.append(self.add(key, check))
            return np.array(added, np.int64), np.array(left, np.int64)
        evict = max(0, self._size + k - self.capacity)
        gone_list, slot = [], self._head
        for _ in range(evict):
            gone_list.append(slot)
            slot = self._n[slot] - 1
        gone = np.array(gone_list, np.int64)
        kern = self._kern
        if kern is not None:  # out of the table while their words are still there
            kern.id_unplace_many(self._table, self.keys, self.checks, gone, self._shift)
        if evict:  # the oldest leave: the list starts after them
            self._head = slot
            if slot >= 0:
                self._p[slot] = 0
            else:
                self._tail = -1
        room: list[int] = []  # the ids that fit take released slots, then fresh ones, as add() does
        while len(room) < k - evict and self._free >= 0:
            room.append(self._free)
            self._free = self._n[self._free] - 1
        fresh = k - evict - len(room)
        while self._fresh + fresh > self.slots:
            self._grow_slots()
        room.extend(range(self._fresh, self._fresh + fresh))
        self._fresh += fresh
        new = np.array(room + gone_list, np.int64)  # the rest take the evicted ids' slots
        self.keys[new] = keys
        if checks.any() and not self.checks.flags.writeable:
            self.checks = self.checks.copy()
            self._views()
        if self.checks.flags.writeable:
            self.checks[new] = checks
        self._link_many(new)
        self._size += k - evict
        size = self._mask + 1
        while 2 * self._size > size and size < self._max_table:
            size *= 2
        if kern is not None:  # the new ids placed one by one, or every id in a grown table
            if size != self._mask + 1:
                self._rehash(size)
            else:
                kern.id_place_many(self._table, self.keys, self.checks, new, self._shift)
            return new, gone
        table = self._table
        old = table[table != 0].astype(np.int64) - 1
        if evict:
            alive = np.ones(self.slots, bool)
            alive[gone] = False
            old = old[alive[old]]
        if size != self._mask + 1:
            self._alloc_table(size)
        self._build(np.concatenate([old, new]))
        return new, gone

    def _link_many(self, new: IntArray) -> None:
        """Link ``new`` (slots, oldest first) after the newest entry."""
        prev, nxt = self._prev, self._next
        nxt[new[:-1]] = new[1:] + 1
        nxt[new[-1]] = 0
        prev[new[1:]] = new[:-1] + 1
        prev[new[0]] = self._tail + 1
        if self._tail >= 0:
            nxt[self._tail] = new[0] + 1
        else:
            self._head = int(new[0])
        self._tail = int(new[-1])

    def _build(self, slots: IntArray) -> None:
        """Lay ``slots`` out in the table, vectorised: sorted by home, each goes to the first position at
        or after its home that the ones before it left (linear probing's layout, whatever the order of
        insertion), started after an empty position so that no run wraps past the end of the table;
        probed one by one if one would anyway."""
        size = self._mask + 1
        words = (self.keys[slots] ^ self.checks[slots]) * np.uint64(_GOLDEN)
        home = (words >> np.uint64(self._shift)).astype(np.int64)
        order = np.argsort(home, kind="stable")
        pos = _runs(home[order])
        if pos.size and pos[-1] >= size:
            taken = np.zeros(size, bool)
            taken[pos % size] = True
            empty = np.flatnonzero(~taken)
            start = int(empty[-1]) + 1 if empty.size else 0
            shifted = (home - start) % size
            order = np.argsort(shifted, kind="stable")
            pos = _runs(shifted[order])
            if pos[-1] >= size:
                self._table[:] = 0
                for slot in slots.tolist():
                    self._place(slot, self._k[slot], self._c[slot])
                return
            pos = (pos + start) % size
        self._table[:] = 0
        self._table[pos] = slots[order] + 1

    def oldest(self) -> int:
        """The slot of the oldest id, or -1 when empty."""
        return self._head

    def add(self, key: int, check: int) -> int:
        """Add an id that is not in the index as the newest; returns its slot."""
        if self._size >= self.capacity:
            raise OverflowError("the index is full: remove the oldest id first")
        if self._free >= 0:
            slot = self._free
            self._free = self._n[slot] - 1
        else:
            slot = self._fresh
            if slot == self.slots:
                self._grow_slots()
            self._fresh += 1
        self._write(slot, key, check)
        self._link_newest(slot)
        self._size += 1
        if 2 * self._size > self._mask + 1 and self._mask + 1 < self._max_table:
            self._rehash(2 * (self._mask + 1))
        else:
            self._place(slot, key, check)
        return slot

    def replace_oldest(self, key: int, check: int) -> int:
        """Remove the oldest id and add this one (not in the index) as the newest, in the same slot."""
        slot = self._head
        if slot < 0:
            return self.add(key, check)
        self._unplace(slot)
        self.renew(slot)
        self._write(slot, key, check)
        self._place(slot, key, check)
        return slot

    def remove(self, slot: int) -> None:
        """Remove the id in ``slot`` (the slot is free for reuse)."""
        self._unlink(slot)
        self._unplace(slot)
        self._n[slot] = self._free + 1
        self._free = slot
        self._size -= 1

    def renew(self, slot: int) -> None:
        """Make the id in ``slot`` the newest."""
        if slot != self._tail:
            self._unlink(slot)
            self._link_newest(slot)

    def order(self) -> IntArray:
        """The slots in use, oldest first."""
        out = np.empty(self._size, np.int64)
        nxt, slot = self._n, self._head
        for i in range(self._size):
            out[i] = slot
            slot = nxt[slot] - 1
        return out

    def _write(self, slot: int, key: int, check: int) -> None:
        self._k[slot] = key
        if check:
            if not self.checks.flags.writeable:  # the first string id: the checks become this index's own
                self.checks = self.checks.copy()
                self._c = self.checks.data
            self._c[slot] = check
        elif not self._c.readonly:
            self._c[slot] = 0

    # --- age order --------------------------------------------------------------------------------------

    def _link_newest(self, slot: int) -> None:
        self._p[slot], self._n[slot] = self._tail + 1, 0
        if self._tail >= 0:
            self._n[self._tail] = slot + 1
        else:
            self._head = slot
        self._tail = slot

    def _unlink(self, slot: int) -> None:
        prev, nxt = self._p[slot] - 1, self._n[slot] - 1
        if prev >= 0:
            self._n[prev] = nxt + 1
        else:
            self._head = nxt
        if nxt >= 0:
            self._p[nxt] = prev + 1
        else:
            self._tail = prev

    # --- hash table -------------------------------------------------------------------------------------

    def _place(self, slot: int, key: int, check: int) -> None:
        if self._kern is not None:
            self._kern.id_place(self._table, slot, key, check, self._shift)
            return
        t, mask = self._t, self._mask
        pos = (((key ^ check) * _GOLDEN) & _WORD) >> self._shift
        while t[pos]:
            pos = (pos + 1) & mask
        t[pos] = slot + 1

    def _unplace(self, slot: int) -> None:
        """Delete ``slot`` from the table, shifting the rest of its probe run back (no tombstones)."""
        if self._kern is not None:
            self._kern.id_unplace(self._table, self.keys, self.checks, slot, self._shift)
            return
        t, k, c, mask, shift = self._t, self._k, self._c, self._mask, self._shift
        hole, mark = (((k[slot] ^ c[slot]) * _GOLDEN) & _WORD) >> shift, slot + 1
        while t[hole] != mark:
            hole = (hole + 1) & mask
        pos = hole
        while True:
            pos = (pos + 1) & mask
            s = t[pos]
            if s == 0:
                break
            home = (((k[s - 1] ^ c[s - 1]) * _GOLDEN) & _WORD) >> shift
            if (pos - home) & mask >= (pos - hole) & mask:  # its home is not after the hole
                t[hole] = s
                hole = pos
        t[hole] = 0

    def _rehash(self, size: int) -> None:
        self._alloc_table(size)
        if self._kern is not None:
            self._kern.id_place_many(self._table, self.keys, self.checks, self.order(), self._shift)
            return
        k, c = self._k, self._c
        for slot in self.order().tolist():
            self._place(slot, k[slot], c[slot])
