"""Error-driven triggers that wrap river's DDM, EDDM and ADWIN (DRUiD paper, Section 5.1).

They watch the 0/1 error of the current predictor. In the paper's *batch* mode a detected drift
recomputes the batch model from the samples seen since the warning (DDM, EDDM) or from the window
(ADWIN, which has no warning level); in *incremental* mode the edge loop swaps in a learner trained since
the warning instead. Either way a detection counts as one model computation, as in the paper.

The river detectors are held by :class:`~edgedrift.monitors.replayable.ReplayableDetector`, so the
monitor can be checkpointed with :mod:`edgedrift.state`; a non-finite error is skipped there.
"""

from __future__ import annotations

from typing import Any, Literal

from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.monitors.base import Evictions, Monitor
from edgedrift.monitors.hooks import RestartHook
from edgedrift.monitors.replayable import ReplayableDetector

Detector = Literal["ddm", "eddm", "adwin"]


def paper_ddm_levels(alpha: float) -> tuple[float, float]:
    """Section 5.1: DDM drift level α; warning β = α − 1 if α > 1 else α. Returns (warning, drift)."""
    return (alpha - 1.0 if alpha > 1.0 else alpha), alpha


def paper_eddm_levels(alpha: float) -> tuple[float, float]:
    """Section 5.1: EDDM warning level α; drift β = α − 0.05 if α > 0.05 else α. Returns (warning, drift)."""
    return alpha, (alpha - 0.05 if alpha > 0.05 else alpha)


class ErrorDrivenMonitor(Monitor, RestartHook):
    """river's DDM / EDDM / ADWIN on the error stream of the current predictor.

    Parameters
    ----------
    detector
        ``"ddm"``, ``"eddm"`` or ``"adwin"``.
    level
        The paper's level of the detector (Section 5.1): DDM's drift level α (warning α − 1), EDDM's
        warning level α (drift α − 0.05), ADWIN's δ.
    mode
        ``"batch"``: a drift recomputes the batch model; ``"incremental"``: the edge loop swaps in a
        learner trained since the warning (``swap_learner_on_drift``).
    min_train
        The fewest samples a batch-mode recompute after DDM or EDDM trains on.

    Examples
    --------
    The error rate of the predictor jumps from 10 % to 50 % at sample 500:

    >>> import numpy as np
    >>> from edgedrift.window import CountWindow
    >>> rng = np.random.default_rng(0)
    >>> errors = np.concatenate([rng.random(500) < 0.1, rng.random(500) < 0.5]).astype(float)
    >>> window, x = CountWindow(200, n_features=1), np.zeros(1)
    >>> monitor = ErrorDrivenMonitor("ddm", level=3.0)
    >>> for i, e in enumerate(errors):
    ...     monitor.update(x, 1.0, e, window, window.push(x, 1.0))
    ...     if monitor.drift_detected:
    ...         break
    >>> i, monitor.train_on_last()  # batch mode retrains on the samples since the warning
    (535, 16)
    """

    def __init__(
        self,
        detector: Detector,
        level: float,
        mode: Literal["batch", "incremental"] = "batch",
        min_train: int = 1,
    ) -> None:
        super().__init__()
        if detector not in ("ddm", "eddm", "adwin"):
            raise ValueError(f"unknown detector {detector!r}")
        self.detector = detector
        self.level = level
        self.mode = mode
        self.min_train = min_train
        self.name = f"{detector}-{mode}"
        self._det = self._new_detector()
        self._since_warning = 0

    def _new_detector(self) -> ReplayableDetector:
        """A fresh river detector for ``detector`` at ``level`` (replayable, so it can be saved)."""
        if self.detector == "ddm":
            warn, drift_level = paper_ddm_levels(self.level)
            return ReplayableDetector("DDM", warning_threshold=warn, drift_threshold=drift_level)
        if self.detector == "eddm":
            warn, drift_level = paper_eddm_levels(self.level)
            return ReplayableDetector("EDDM", alpha=warn, beta=drift_level)
        return ReplayableDetector("ADWIN", delta=self.level)

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        self._det = self._new_detector()
        self._since_warning = 0
        self.drift_detected = False
        self.warning_detected = False

    def update(self, x: FloatArray, y: float, error: float, window: Evictions, n_evicted: int) -> None:
        self._det.update(error)
        self.warning_detected = self._det.warning_detected
        self.drift_detected = self._det.drift_detected
        # Samples since the warning began; a warning that clears without a drift starts over (as in MOA).
        self._since_warning = self._since_warning + 1 if self.warning_detected or self.drift_detected else 0
        if self.drift_detected:
            self.n_detections += 1

    def train_on_last(self) -> int | None:
        """DDM/EDDM batch mode trains on the samples since the warning; ADWIN on the window."""
        if self.detector == "adwin":
            return None
        return max(self._since_warning, self.min_train)

    @property
    def stats(self) -> dict[str, Any]:
        return {**super().stats, "since_warning": self._since_warning, "skipped": self._det.n_skipped}
