"""Why a device is still in warm-up: the ``warmup`` field of its status and the ``warmup_stalled`` event.

A device whose first window is full but cannot train a model (too few labels, one class only, labels
rejected because they are not in the task's encoding, the cloud refusing the first model) used to answer
``y_hat`` null for ever with status ``online`` and no word why. Here the session says which of these
holds, with the counts, in its status, and emits ``warmup_stalled`` when the window is full and stuck:
once per cause, and again every ``warmup_samples`` samples while it stays stuck. Rejected labels point
to the fix (``classes``: two class names map to −1/+1, docs/edge-agent.md). A mixin of
:class:`~edgedrift_edge.session.DeviceSession` (its state: the last stall reported).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from edgedrift_edge.buffers.packed_rows import PackedRows
from edgedrift_edge.session.ledger import Counters, SessionConfig

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


class WarmupMixin:
    """The warm-up's report (see the module docstring)."""

    config: SessionConfig
    counters: Counters
    phase: str
    warm_y: list[float]
    warm_rows: PackedRows
    cooldown_until: float
    #: The reason of the last rejected label, shown with the count.
    last_label_rejection: str | None
    #: The cause of the stall last reported and the sample count at that report.
    _stall: tuple[str, int] | None

    if TYPE_CHECKING:

        def _emit(self, kind: str, **values: Any) -> None: ...

        def clock(self) -> float: ...

    def _stuck(self) -> tuple[str, str] | None:
        """(cause, words) of what keeps a full first window from training a model; None if nothing."""
        if self.phase == "awaiting_model":
            return "awaiting_model", "the first window is full; waiting for the first model from the cloud"
        wait = self.cooldown_until - self.clock()
        if wait > 0:
            return "cooldown", f"the cloud refused the first model; asking again in {wait:.0f} s"
        labels = [y for y in self.warm_y if not math.isnan(y)]
        rejected = self.counters.rejected_labels
        why = ""
        if rejected:
            why = f"; {rejected} labels were rejected ({self.last_label_rejection}): {LABELS_HINT}"
        if len(labels) < MIN_WARMUP_LABELS:
            return "labels", f"the first window has {len(labels)} labels, it needs {MIN_WARMUP_LABELS}{why}"
        if self.config.task == "classification" and len(set(labels)) < 2:
            return "one_class", f"every label of the first window is {labels[0]:g}, it needs two classes{why}"
        return None

    def warmup_state(self) -> dict[str, Any] | None:
        """The ``warmup`` field of the status: None once running."""
        if self.phase == "running":
            return None
        labels = [y for y in self.warm_y if not math.isnan(y)]
        stuck = self._stuck() if len(self.warm_y) >= self.config.warmup_samples else None
        return {
            "samples": len(self.warm_y),
            "needed": self.config.warmup_samples,
            "labels": len(labels),
            "labels_needed": MIN_WARMUP_LABELS,
            "classes_seen": len(set(labels)),
            "rejected_labels": self.counters.rejected_labels,
            "reason": None if stuck is None else stuck[1],
        }

    def _report_stall(self) -> None:
        """The first window is full and could not train: say why (once per cause, then every
        ``warmup_samples`` samples while it lasts)."""
        stuck = self._stuck()
        if stuck is None:
            return
        cause, words = stuck
        samples = self.counters.samples
        last = self._stall
        if last is not None and last[0] == cause and samples - last[1] < self.config.warmup_samples:
            return
        self._stall = (cause, samples)
        state = self.warmup_state() or {}
        self._emit("warmup_stalled", cause=cause, **{**state, "reason": words})
