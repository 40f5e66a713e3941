"""Any ``river.drift`` detector instance as an error-driven monitor.

The detector watches the current predictor's error (0/1 for a classifier, the squared error for a
regressor); a drift recomputes the batch model on the newest ``last`` labeled samples of the window (then
the window restarts there, as after DDM's warning) and, with ``refill``, once more on the whole window
when it has filled again with samples of the new concept. A detector without a warning level that fires
on an abrupt change and retrains on the whole window (``last=None``) gets a model of mostly the old
concept, whose error is high but *stable*, which such a detector does not flag again; on a stream whose
concept flips back and forth (Sine1) ADWIN then fires on each recovery too and retrains on the concept
that just ended: 0.139 accuracy, against 0.504 for the no-change baseline. The newest 30 labels follow
the change at once; the refill recompute then gives a model as well-fed as the whole window's (ELEC2,
where a model of 30 labels is worse than the no-change baseline): docs/ecosystem.md has the figures.
After every recompute the monitor starts over with a fresh clone of the instance it was given, so the
instance's parameters (PageHinkley's threshold, KSWIN's α and window, ADWIN's δ, ...) are the user's and
nothing else needs a ``reset``.

A detector of ``river.drift`` / ``river.drift.binary`` whose parameters are all scalars runs inside a
:class:`~edgedrift.monitors.replayable.ReplayableDetector`, so the agent can checkpoint it; any other
detector (KSWIN, whose parameters include its initial window, or a third party's) is held as it is, and
a checkpoint of it fails with a :class:`~edgedrift.state.StateError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.monitors.base import Evictions, Monitor
from edgedrift.monitors.hooks import RestartHook
from edgedrift.monitors.replayable import ReplayableDetector, detector_classes
from edgedrift.state import StateError

__all__ = ["DEFAULT_LAST", "RiverDriftMonitor"]

#: Newest labels a detection's recompute trains on by default: the detectors' usual delay on an abrupt
#: change (river's ADWIN checks every 32 inputs; PageHinkley's and KSWIN's ``min_instances`` and
#: ``stat_size`` are 30), so they are mostly of the new concept.
DEFAULT_LAST = 30


def _fresh(detector: Any) -> Any:
    """A fresh detector like ``detector``: replayable when river's checkpointable set allows it."""
    try:
        return ReplayableDetector(type(detector), **detector._get_params())
    except (TypeError, StateError):
        return detector.clone()


class RiverDriftMonitor(Monitor, RestartHook):
    """A river drift detector on the error stream; a drift retrains the batch model on the window.

    Parameters
    ----------
    detector
        An instance of a ``river.drift`` detector (anything with ``update``, ``drift_detected`` and
        ``clone``); ``warning_detected`` is read when it has one.
    last
        Newest labeled samples a detection's recompute trains on (None: the whole window).
    refill
        After a detection's recompute on the newest ``last``, recompute once more on the whole window
        as soon as it holds only samples since (it evicts again).

    Examples
    --------
    >>> import numpy as np
    >>> from river import drift
    >>> from edgedrift.window import CountWindow
    >>> rng = np.random.default_rng(0)
    >>> errors = np.concatenate([rng.random(500) < 0.1, rng.random(500) < 0.6]).astype(float)
    >>> window, x = CountWindow(200, n_features=1), np.zeros(1)
    >>> monitor = RiverDriftMonitor(drift.PageHinkley())
    >>> for i, e in enumerate(errors):
    ...     monitor.update(x, 1.0, e, window, window.push(x, 1.0))
    ...     if monitor.drift_detected:
    ...         break
    >>> monitor.name, i > 500
    ('PageHinkley', True)
    """

    #: The user's instance is not saved; a replayable detector's class and parameters rebuild it.
    _state_transient = ("detector",)

    def __init__(self, detector: Any, last: int | None = DEFAULT_LAST, refill: bool = True) -> None:
        super().__init__()
        for attribute in ("update", "drift_detected", "clone"):
            if not hasattr(detector, attribute):
                raise TypeError(f"{type(detector).__name__} is not a river drift detector (no {attribute!r})")
        if last is not None and last < 1:
            raise ValueError("last must be >= 1 or None")
        self.detector = detector
        self.last = last
        self.refill = refill
        self.name = type(detector).__name__
        self._det: Any = _fresh(detector)
        #: Labels since the last recompute; what the newest firing was ("detection" or "refill": the
        #: recompute it asked for trains on the newest ``last`` or on the whole window); whether a refill
        #: recompute is due.
        self._since_reset = 0
        self._fired: str | None = None
        self._refill_due = False

    def _state_restored(self) -> None:
        """After :func:`edgedrift.state.loads`: rebuild the template from the replayable detector."""
        if isinstance(self._det, ReplayableDetector):
            self.detector = detector_classes()[self._det.kind](**self._det.params)

    def clone(self, new_params: Mapping[str, Any] | None = None) -> Self:
        """A fresh monitor around a fresh clone of the detector (river detectors may not deep-copy)."""
        detector = (new_params or {}).get("detector", self.detector)
        params = {"last": self.last, "refill": self.refill, **(new_params or {})}
        return type(self)(detector.clone(), params["last"], params["refill"])

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        # A detection's recompute on the newest `last` samples calls for a refill once the window is full.
        self._refill_due = self.refill and self.last is not None and self._fired == "detection"
        self._fired = None
        self._since_reset = 0
        self._det = _fresh(self.detector)
        self.drift_detected = False
        self.warning_detected = False

    def update(self, x: FloatArray, y: float, error: float, window: Evictions, n_evicted: int) -> None:
        self._det.update(error)
        self._since_reset += 1
        self.drift_detected = bool(self._det.drift_detected)
        self.warning_detected = bool(getattr(self._det, "warning_detected", False))
        if self.drift_detected:
            self.n_detections += 1
            self._fired = "detection"
        elif self._refill_due and n_evicted > 0 and self._since_reset > (self.last or 0):
            # The window evicts again: it holds only samples since the detection's recompute.
            self._refill_due = False
            self._fired = "refill"
            self.drift_detected = True

    def train_on_last(self) -> int | None:
        return None if self._fired == "refill" else self.last
