"""The deduplication half of a device's session: which samples of a message are new, which repeat one
already processed (a QoS-1 redelivery) and which reuse an id with other content (a sensor that restarted
its count), against the device's :class:`~edgedrift_edge.buffers.recent_samples.RecentSamples`. A mixin of
:class:`~edgedrift_edge.session.DeviceSession` (no state of its own)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from edgedrift_edge.buffers.id_index import IntArray, distinct, id_key
from edgedrift_edge.buffers.recent_samples import RecentSamples
from edgedrift_edge.session.ledger import Counters
from edgedrift_edge.session.messages import UNKNOWN_CONTENT, SampleId, Samples, content_keys, content_keys_of

#: Samples of a message from which its ids go through the windows in one vectorised pass.
BATCH_WORDS = 8


class DedupMixin:
    """Sorting a message's samples against the recent samples (see the module docstring)."""

    recent_samples: RecentSamples
    counters: Counters

    if TYPE_CHECKING:

        def _emit(self, kind: str, **values: Any) -> None: ...

    def _dedup_new(self, s: Samples) -> IntArray | None:
        """A batch of distinct int ids none of which is in the window (the usual case): put them all in
        one vectorised pass and return their slots in the window (-1 for an id that a later one of the
        batch pushed out); None (nothing done) otherwise, for :meth:`_dedup`."""
        ids = s.ids
        if len(ids) < BATCH_WORDS or s.rows is not None or not all(type(i) is int for i in ids):
            return None
        try:
            keys = np.array(ids, np.int64).view(np.uint64)
        except OverflowError:
            return None
        checks = np.zeros(len(ids), np.uint64)
        if not distinct(keys) or (self.recent_samples.index.find_many(keys, checks) >= 0).any():
            return None
        slots, evicted = self.recent_samples.put_many(keys, checks, content_keys_of(s.X, s.y, s.ts))
        self.counters.join_evictions += evicted
        return slots

    def _dedup(self, s: Samples) -> tuple[list[int] | None, list[int]]:
        """Positions to process (None = all) and positions that repeat a sample already processed.

        Every sample of a message is looked up against the window as it was before the message (and the
        message's own earlier samples); the window is updated afterwards, the oldest ids leaving it then.
        """
        recent = self.recent_samples
        keep: list[int] = []
        repeats: list[int] = []
        if s.rows is None:
            keys = content_keys_of(s.X, s.y, s.ts).tolist()
        else:
            keys = content_keys([r.tolist() for r in s.rows], s.y.tolist(), s.ts.tolist())
        seen: dict[SampleId, int] = {}  # this message's ids so far -> their content keys
        puts: list[tuple[int, int, int, bool]] = []  # id words, content key, known to be absent
        for i, sid in enumerate(s.ids):
            key = keys[i]
            words = id_key(sid)
            old = seen[sid] if sid in seen else recent.lookup(*words)
            if old is None:
                keep.append(i)
            elif old in (key, UNKNOWN_CONTENT):  # unknown: from a checkpoint of another digest
                repeats.append(i)
                continue
            else:
                self.counters.id_reused += 1
                self._emit("id_reused", id=sid, reason="same id, different content: processed as new")
                keep.append(i)
            puts.append((*words, key, old is None))
            seen[sid] = key
        self.counters.join_evictions += sum(recent.put_words(*put) for put in puts)
        return (None if len(keep) == len(s.ids) else keep), repeats
