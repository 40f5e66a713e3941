"""A device's first window while it warms up, and why it may still be warming up: the ``warmup`` field of
its status and the ``warmup_stalled`` event.

A device whose first window is full but cannot train a model (too few labels, one class only, labels
rejected because they are not in the task's encoding, the cloud refusing the first model) used to answer
``y_hat`` null for ever with status ``online`` and no word why. Here the window says which of these
holds, with the counts, and the session emits ``warmup_stalled`` when the window is full and stuck: once
per cause, and again every ``warmup_samples`` samples while it stays stuck. Rejected labels point to the
fix (``classes``: two class names map to −1/+1, docs/edge-agent.md). Owned by
:class:`~edgedrift_edge.session.DeviceSession`.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgedrift.models.losses import FloatArray
from edgedrift_edge.buffers.id_index import id_key
from edgedrift_edge.buffers.packed_rows import PackedRows
from edgedrift_edge.session import codec
from edgedrift_edge.session.ledger import SessionConfig
from edgedrift_edge.session.messages import SampleId

#: The check word of a sample without an id (a real id's check word is 0 or odd: ``id_key``).
_NO_ID = 2


def _words(sid: SampleId | None) -> tuple[int, int]:
    """The id's (key, check) words; (0, ``_NO_ID``) for a sample without one."""
    return (0, _NO_ID) if sid is None else id_key(sid)


#: The fewest labels (and, for classification, two classes) the first window needs to train a model.
MIN_WARMUP_LABELS = 10
#: What a device whose labels are rejected should look at.
LABELS_HINT = (
    "labels of another encoding (e.g. 0/1) are class names: set classes (e.g. classes=0,1, the first "
    "becomes -1 and the second +1; docs/edge-agent.md, 'Labels')"
)


def is_label_rejection(reason: str) -> bool:
    """Whether a rejection's reason is about its label ``y`` (its encoding or its value)."""
    return reason.startswith(("y ", "y:"))


@dataclass
class Waiting:
    """What the session knows beyond the window about why it is not running yet."""

    phase: str
    #: Seconds until the cloud may be asked again after a refused first model (≤ 0: it may).
    cooldown_s: float
    rejected_labels: int
    #: The reason of the last rejected label, shown with the count.
    last_rejection: str | None


class WarmupWindow:
    """The first window's rows, labels (NaN: not labeled yet) and ids, and the stall last reported. Rows,
    labels and ids are packed (:class:`PackedRows`; ``array``s of doubles and of the ids' 64-bit words,
    :func:`~edgedrift_edge.buffers.id_index.id_key`): no Python object per sample. A gateway warms a
    thousand devices at once, and objects per sample left its small-object arenas pinned for good
    (:mod:`~edgedrift_edge.buffers.packed_rows`)."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        #: The cause of the stall last reported and the sample count at that report.
        self.stall: tuple[str, int] | None = None
        self._empty()

    def _empty(self) -> None:
        self.rows = PackedRows()
        self.y = array("d")
        self.id_keys, self.id_checks = array("Q"), array("Q")

    def __len__(self) -> int:
        return len(self.y)

    def full(self) -> bool:
        """``warmup_samples`` samples, or as many as the byte budget holds (``recent_bytes``: wide rows)."""
        if len(self.y) >= self.config.warmup_samples:
            return True
        budget = self.config.recent_bytes
        return budget is not None and len(self.y) > 0 and self.rows.nbytes + self.rows.last_nbytes > budget

    def add(self, row: Any, y: float, sid: SampleId | None) -> None:
        self.rows.append(row)
        self.y.append(y)
        key, check = _words(sid)
        self.id_keys.append(key)
        self.id_checks.append(check)

    def bound(self, cap: int) -> None:
        """Keep the newest ``cap`` samples, and no more than the byte budget holds (``recent_bytes``: a
        device stuck in warm-up with rows of 4,096 features kept 4,000 of them, 131 MB, before)."""
        excess = len(self.y) - cap
        if self.config.recent_bytes is not None:
            excess = max(excess, self.rows.over(self.config.recent_bytes))
        if excess > 0:
            self.rows.drop_oldest(excess)
            del self.y[:excess], self.id_keys[:excess], self.id_checks[:excess]

    def label(self, sid: SampleId, y: float) -> None:
        """A late label for a sample still in the window (the newest with that id)."""
        key, check = id_key(sid)
        keys, checks = self.id_keys, self.id_checks
        for i in range(len(keys) - 1, -1, -1):
            if keys[i] == key and checks[i] == check:
                self.y[i] = y
                return

    def take(self) -> tuple[PackedRows, array[float]]:
        """The rows and labels, leaving the window empty."""
        rows, y = self.rows, self.y
        self._empty()
        return rows, y

    def put_back(self, X: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> None:
        """A refused first window goes back before what arrived since (its ids are not kept)."""
        self.rows = PackedRows([*X, *self.rows])
        self.y = array("d", [*y.tolist(), *self.y])
        self.id_keys = array("Q", [0]) * len(y) + self.id_keys
        self.id_checks = array("Q", [_NO_ID]) * len(y) + self.id_checks

    def snapshot(self, tree: dict[str, Any]) -> None:
        """Into a checkpoint's tree: ``warm_rows``, ``warm_y`` and ``warm_id_words`` (keys, checks)."""
        tree["warm_rows"] = codec.pack_rows(list(self.rows))
        tree["warm_y"] = self.y.tolist()
        tree["warm_id_words"] = [self.id_keys.tolist(), self.id_checks.tolist()]

    def restore(self, tree: dict[str, Any]) -> None:
        """From :meth:`snapshot`'s fields, or from a checkpoint that kept the ids (``warm_ids``)."""
        self.rows = PackedRows(codec.unpack_rows(tree["warm_rows"]))
        self.y = array("d", tree["warm_y"])
        if "warm_id_words" in tree:
            keys, checks = tree["warm_id_words"]
        else:
            words = [_words(sid) for sid in tree["warm_ids"]]
            keys, checks = [k for k, _ in words], [c for _, c in words]
        self.id_keys, self.id_checks = array("Q", keys), array("Q", checks)

    def labels(self, width: int | None = None) -> FloatArray:
        """The labels given so far, oldest first; with ``width``, of the rows of that width only. Vectorised:
        a full window that cannot train asks at every sample that arrives (2 ms a sample at 1,000 rows
        when it walked the rows)."""
        y = np.array(self.y, dtype=np.float64)
        keep = ~np.isnan(y)
        if width is not None:
            keep &= self.rows.widths == width
        return y[keep]

    def common_width(self) -> int:
        """The most frequent row width (of equally frequent ones, the one seen first)."""
        widths, first, counts = np.unique(self.rows.widths, return_index=True, return_counts=True)
        tied = counts == counts.max()
        return int(widths[tied][np.argmin(first[tied])])

    def trainable(self, width: int, task: str) -> bool:
        """Whether the rows of ``width`` hold enough labels to train (and two classes to classify)."""
        labels = self.labels(width)
        return len(labels) >= MIN_WARMUP_LABELS and (task != "classification" or np.unique(labels).size > 1)

    def stuck(self, why: Waiting) -> tuple[str, str] | None:
        """(cause, words) of what keeps a full first window from training a model; None if nothing."""
        if why.phase == "awaiting_model":
            return "awaiting_model", "the first window is full; waiting for the first model from the cloud"
        if why.cooldown_s > 0:
            return "cooldown", f"the cloud refused the first model; asking again in {why.cooldown_s:.0f} s"
        labels = self.labels()
        rejected = f"; {why.rejected_labels} labels were rejected ({why.last_rejection}): {LABELS_HINT}"
        words = rejected if why.rejected_labels else ""
        if len(labels) < MIN_WARMUP_LABELS:
            return "labels", f"the first window has {len(labels)} labels, it needs {MIN_WARMUP_LABELS}{words}"
        if self.config.task == "classification" and np.unique(labels).size < 2:
            return (
                "one_class",
                f"every label of the first window is {labels[0]:g}, it needs two classes{words}",
            )
        return None

    def state(self, why: Waiting) -> dict[str, Any] | None:
        """The ``warmup`` field of the status: None once running."""
        if why.phase == "running":
            return None
        labels = self.labels()
        stuck = self.stuck(why) if self.full() else None
        return {
            "samples": len(self.y),
            "needed": self.config.warmup_samples,
            "labels": len(labels),
            "labels_needed": MIN_WARMUP_LABELS,
            "classes_seen": int(np.unique(labels).size),
            "rejected_labels": why.rejected_labels,
            "reason": None if stuck is None else stuck[1],
        }

    def stall_event(self, why: Waiting, samples: int) -> dict[str, Any] | None:
        """The ``warmup_stalled`` event's fields when the full window could not train and this cause was
        not reported in the last ``warmup_samples`` samples; None otherwise."""
        stuck = self.stuck(why)
        if stuck is None:
            return None
        cause, words = stuck
        last = self.stall
        if last is not None and last[0] == cause and samples - last[1] < self.config.warmup_samples:
            return None
        self.stall = (cause, samples)
        return {"cause": cause, **(self.state(why) or {}), "reason": words}
