"""The duplicate window: the content key (:func:`~edgedrift_edge.messages.content_keys`) of the newest
``capacity`` sample ids, to tell a redelivery (same id, same content) from a reused id. An
:class:`~edgedrift_edge.id_index.IdIndex` and a parallel int64 vector of content keys that grows with the
index's slots.

Checkpoint tree: ``{"id_keys", "id_checks", "keys"}``, oldest first; :meth:`IdWindow.restore` also reads
the former ``{"ids", "keys"}`` (ids as written by the OrderedDict window).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgedrift_edge.id_index import IdIndex, IntArray, WordArray, grown, id_key
from edgedrift_edge.messages import SampleId


class IdWindow:
    """Sample id -> content key for the newest ``capacity`` ids (see the module)."""

    def __init__(self, capacity: int) -> None:
        self.index = IdIndex(capacity)
        self.capacity = capacity
        self._keys = np.zeros(self.index.slots, np.int64)
        self._kv = self._keys.data

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, sid: SampleId) -> bool:
        return self.index.find(*id_key(sid)) >= 0

    def get(self, sid: SampleId) -> int | None:
        """The content key last seen with ``sid``, or None when the id is not in the window."""
        return self.lookup(*id_key(sid))

    def lookup(self, key: int, check: int) -> int | None:
        """:meth:`get` by the id's words (:func:`~edgedrift_edge.id_index.id_key`)."""
        slot = self.index.find(key, check)
        return None if slot < 0 else self._kv[slot]

    def put(self, sid: SampleId, content: int) -> None:
        """``sid`` becomes the newest id, with this content key; the oldest id leaves a full window."""
        self.put_words(*id_key(sid), content)

    def put_words(self, key: int, check: int, content: int, absent: bool = False) -> None:
        """:meth:`put` by the id's words; ``absent``: the caller knows the id is not in the window."""
        index = self.index
        slot = -1 if absent else index.find(key, check)
        if slot >= 0:
            index.renew(slot)
        elif len(index) >= self.capacity:
            slot = index.replace_oldest(key, check)
        else:
            slot = index.add(key, check)
            if slot >= len(self._keys):
                self._keys = grown(self._keys, index.slots)
                self._kv = self._keys.data
        self._kv[slot] = content

    def put_many(self, keys: WordArray, checks: WordArray, contents: IntArray) -> None:
        """:meth:`put_words` for distinct ids known to be absent, in order, in one vectorised pass."""
        if len(keys) > self.capacity:
            for key, check, content in zip(keys.tolist(), checks.tolist(), contents.tolist(), strict=True):
                self.put_words(key, check, content, absent=True)
            return
        slots, _ = self.index.add_many(keys, checks)
        if self.index.slots > len(self._keys):
            self._keys = grown(self._keys, self.index.slots)
            self._kv = self._keys.data
        self._keys[slots] = contents

    # --- checkpoints ------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The ids and their content keys, oldest first, as three arrays."""
        order = self.index.order()
        return {
            "id_keys": self.index.keys[order],
            "id_checks": self.index.checks[order],
            "keys": self._keys[order],
        }

    @classmethod
    def restore(cls, tree: dict[str, Any], capacity: int) -> IdWindow:
        """A window of ``capacity`` with the newest ids of a :meth:`snapshot` (or of the former format)."""
        contents = tree["keys"][-capacity:].tolist()
        if "ids" in tree:
            words = [id_key(sid) for sid in tree["ids"][-capacity:]]
        else:
            words = list(
                zip(tree["id_keys"][-capacity:].tolist(), tree["id_checks"][-capacity:].tolist(), strict=True)
            )
        window = cls(capacity)
        for (key, check), content in zip(words, contents, strict=True):
            window.put_words(key, check, content)
        return window
