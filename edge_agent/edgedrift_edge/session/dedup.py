"""Deduplication of a message's samples: which are new, which repeat one already processed (a QoS-1
redelivery) and which reuse an id with other content (a sensor that restarted its count), against the
device's :class:`~edgedrift_edge.buffers.recent_samples.RecentSamples`. Functions of the recent samples
and the message only; :class:`~edgedrift_edge.session.DeviceSession` counts and reports what they find."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from edgedrift_edge.buffers.id_index import IntArray, distinct, id_key
from edgedrift_edge.buffers.recent_samples import RecentSamples
from edgedrift_edge.session.messages import UNKNOWN_CONTENT, SampleId, Samples, content_keys, content_keys_of

#: Samples of a message from which its ids go through the windows in one vectorised pass.
BATCH_WORDS = 8


class Placed(NamedTuple):
    """A batch of new ids put in the recent samples in one pass."""

    #: Each sample's slot in the recent samples (-1: pushed out by a later id of the same batch).
    slots: IntArray
    #: Older entries pushed out of the recent samples.
    evicted: int


class Sorted(NamedTuple):
    """A message's samples sorted against the recent samples."""

    #: Positions to process (None: all of them).
    keep: list[int] | None
    #: Positions that repeat a sample already processed.
    repeats: list[int]
    #: Ids kept although seen before with other content.
    reused: list[SampleId]
    #: Older entries pushed out of the recent samples.
    evicted: int


def place_new(recent: RecentSamples, s: Samples) -> Placed | None:
    """A batch of distinct int ids none of which is in the window (the usual case): put them all in one
    vectorised pass; None (nothing done) otherwise, for :func:`sort_samples`."""
    ids = s.ids
    if len(ids) < BATCH_WORDS or s.rows is not None or not all(type(i) is int for i in ids):
        return None
    try:
        keys = np.array(ids, np.int64).view(np.uint64)
    except OverflowError:
        return None
    checks = np.zeros(len(ids), np.uint64)
    if not distinct(keys) or (recent.index.find_many(keys, checks) >= 0).any():
        return None
    slots, evicted = recent.put_many(keys, checks, content_keys_of(s.X, s.y, s.ts))
    return Placed(slots, evicted)


def sort_samples(recent: RecentSamples, s: Samples) -> Sorted:
    """Every sample of a message looked up against the window as it was before the message (and the
    message's own earlier samples); the window is updated afterwards, the oldest ids leaving it then."""
    keep: list[int] = []
    repeats: list[int] = []
    reused: list[SampleId] = []
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
            reused.append(sid)
            keep.append(i)
        puts.append((*words, key, old is None))
        seen[sid] = key
    evicted = sum(recent.put_words(*put) for put in puts)
    return Sorted(None if len(keep) == len(s.ids) else keep, repeats, reused, evicted)
