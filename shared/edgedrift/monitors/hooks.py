"""Optional monitor hooks: small protocols the edge loop looks for once, when it gets its monitor.

A :class:`~edgedrift.monitors.base.Monitor` watches labeled samples and raises flags; that is all most
recompute triggers need. A few need more of the loop, and each such need is one protocol here. A
monitor offers a hook by defining its members (declaring the protocol as a base says so in the class
line); :class:`~edgedrift.loop.EdgeLoop` checks with ``isinstance`` when the monitor is set, not per
sample, so a monitor without hooks costs nothing.

* :class:`UnlabeledHook`: sees unlabeled samples (PredSign counts their bound disagreements);
* :class:`RestartHook`: the recompute trains on the newest k window samples and the window restarts
  there (DRUiD with ``restart``, DDM and EDDM in batch mode);
* :class:`SelectionHook`: the monitor keeps its own training data, may decline a recomputed model and
  may predict with another one (RebalanceStream and RebalanceStream+);
* :class:`WarningHook`: with ``predict_with="monitor"``, the incremental learner predicts while the
  monitor warns (Algorithm 1 of the DRUiD paper).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray

__all__ = ["RestartHook", "SelectionHook", "UnlabeledHook", "WarningHook"]


@runtime_checkable
class UnlabeledHook(Protocol):
    """A monitor that watches unlabeled samples too."""

    def update_unlabeled(self, x: FloatArray) -> None:
        """An unlabeled sample."""

    def update_unlabeled_many(self, X: FloatArray) -> None:
        """A batch of unlabeled samples."""


@runtime_checkable
class RestartHook(Protocol):
    """A monitor that may shorten the recompute's training set to the newest window samples."""

    def train_on_last(self) -> int | None:
        """How many of the newest window samples the recompute should use (None: the whole window)."""


@runtime_checkable
class SelectionHook(Protocol):
    """A monitor with its own training data that chooses which model is installed and which predicts."""

    def training_batch(self) -> tuple[FloatArray, FloatArray, int | None] | None:
        """The data a recompute trains on (None: the loop's window).

        Returns (X, y, reset_rows): ``reset_rows`` (when not None) is how many of the last rows form a
        second candidate set, e.g. RebalanceStream's reset batch; the loop passes it to the trainer.
        """

    def accept(self, model: BatchModel) -> bool:
        """Whether the loop should install a model a recompute returned (False: keep the current one)."""

    def prediction_model(self) -> BatchModel | None:
        """A model the loop should predict with instead of its own (None: its own)."""


@runtime_checkable
class WarningHook(Protocol):
    """A monitor whose warnings may hand prediction to the incremental learner."""

    #: True: predict with the incremental learner while ``warning_detected`` (``predict_with="monitor"``).
    incremental_during_warning: bool
