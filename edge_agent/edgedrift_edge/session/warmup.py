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

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgedrift_edge.buffers.packed_rows import PackedRows
from edgedrift_edge.session.ledger import SessionConfig
from edgedrift_edge.session.messages import SampleId

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
    """The first window's rows, labels (NaN: not labeled yet) and ids, and the stall last reported."""

    def __init__(self, config: SessionConfig) -> None:
        self.config = config
        self.rows = PackedRows()
        self.y: list[float] = []
        self.ids: list[SampleId | None] = []
        #: The cause of the stall last reported and the sample count at that report.
        self.stall: tuple[str, int] | None = None

    def __len__(self) -> int:
        return len(self.y)

    def full(self) -> bool:
        return len(self.y) >= self.config.warmup_samples

    def add(self, row: Any, y: float, sid: SampleId | None) -> None:
        self.rows.append(row)
        self.y.append(y)
        self.ids.append(sid)

    def bound(self, cap: int) -> None:
        """Keep the newest ``cap`` samples."""
        excess = len(self.y) - cap
        if excess > 0:
            self.rows.drop_oldest(excess)
            del self.y[:excess], self.ids[:excess]

    def label(self, sid: SampleId, y: float) -> None:
        """A late label for a sample still in the window (the newest with that id)."""
        for i in range(len(self.ids) - 1, -1, -1):
            if self.ids[i] == sid:
                self.y[i] = y
                return

    def take(self) -> tuple[PackedRows, list[float]]:
        """The rows and labels, leaving the window empty."""
        rows, y = self.rows, self.y
        self.rows, self.y, self.ids = PackedRows(), [], []
        return rows, y

    def put_back(self, X: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> None:
        """A refused first window goes back before what arrived since (its ids are not kept)."""
        self.rows = PackedRows([*X, *self.rows])
        self.y = [*y.tolist(), *self.y]
        self.ids = [*([None] * len(y)), *self.ids]

    def labels(self) -> list[float]:
        return [y for y in self.y if not math.isnan(y)]

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
        if self.config.task == "classification" and len(set(labels)) < 2:
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
            "classes_seen": len(set(labels)),
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
