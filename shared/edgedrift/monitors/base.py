"""The monitor interface shared by every recompute trigger (river's drift-detector style).

A monitor watches the labeled stream under the current batch model β₁ and raises ``drift_detected`` when
a batch recompute is due; ``warning_detected`` means "suspected". After a recompute the loop calls
:meth:`Monitor.reset` with the new model and the window it was trained on. What some monitors need
beyond this (unlabeled samples, their own training data, a shorter training window, prediction during
warnings) are the optional protocols of :mod:`edgedrift.monitors.hooks`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from edgedrift.base import Estimator
from edgedrift.models.document import BatchModel
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray


class Evictions(Protocol):
    """Where a monitor reads the samples a window push evicted (a window, or a slice of a batch)."""

    evicted_X: FloatArray
    evicted_y: FloatArray


@dataclass
class _EvictionSlice:
    evicted_X: FloatArray
    evicted_y: FloatArray


def eviction_steps(k: int, n_evicted: int) -> np.ndarray:
    """After step t (1…k) of a batch push, how many of its ``n_evicted`` evictions have happened.

    A count window evicts nothing while it fills and then one sample per push, so the evictions are the
    last ``n_evicted`` steps; a time window's batch evictions are placed the same way.
    """
    return np.maximum(0, np.arange(1, k + 1) - (k - n_evicted))


def require_linear(model: BatchModel, monitor: str) -> LinearModel:
    """``model`` as a LinearModel; TypeError for any other model (the bounds are for linear models)."""
    if not isinstance(model, LinearModel):
        raise TypeError(f"the {monitor} monitor bounds linear models only, got {type(model).__name__}")
    return model


class Monitor(Estimator, ABC):
    """Decides when the batch model is stale (hyper-parameters and ``clone`` as :class:`Estimator`)."""

    #: Short name used in results and events.
    name: str = "monitor"

    def __init__(self) -> None:
        self.drift_detected = False
        self.warning_detected = False
        self.n_detections = 0

    @abstractmethod
    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        """A new batch model ``model`` trained on (X, y) was installed: start monitoring it."""

    @abstractmethod
    def update(self, x: FloatArray, y: float, error: float, window: Evictions, n_evicted: int) -> None:
        """A labeled sample (already pushed into ``window``, which evicted ``n_evicted`` samples).

        ``error`` is the current predictor's loss on the sample before learning it (0/1 for
        classification, squared error for regression).
        """

    def update_many(
        self, X: FloatArray, y: FloatArray, errors: FloatArray, window: Evictions, n_evicted: int
    ) -> None:
        """A batch of labeled samples already pushed into the window, which evicted ``n_evicted``.

        Flags reflect the whole batch: ``drift_detected`` is set if any step of it called for a
        recompute. This default replays :meth:`update` per sample with the interleaving of
        :func:`eviction_steps`; vectorised monitors override it.
        """
        ev_X = window.evicted_X[:n_evicted].copy()
        ev_y = window.evicted_y[:n_evicted].copy()
        done = 0
        drift = False
        for t, e in enumerate(eviction_steps(len(y), n_evicted)):
            self.update(
                X[t], float(y[t]), float(errors[t]), _EvictionSlice(ev_X[done:e], ev_y[done:e]), int(e - done)
            )
            done = int(e)
            drift = drift or self.drift_detected
        self.drift_detected = drift

    @property
    def stats(self) -> dict[str, Any]:
        """Readable state for events, heartbeats and plots."""
        return {"detections": self.n_detections, "warning": self.warning_detected}


class NeverMonitor(Monitor):
    """Never asks for a recompute (incremental learning only, after the initial batch model).

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.window import CountWindow
    >>> window, x = CountWindow(10, n_features=2), np.zeros(2)
    >>> monitor = NeverMonitor()
    >>> monitor.update(x, 1.0, error=1.0, window=window, n_evicted=window.push(x, 1.0))
    >>> monitor.drift_detected, monitor.stats
    (False, {'detections': 0, 'warning': False})
    """

    name = "never"

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        self.drift_detected = False

    def update(self, x: FloatArray, y: float, error: float, window: Evictions, n_evicted: int) -> None:
        return None


class PeriodicMonitor(Monitor):
    """The DRUiD paper's periodic sliding window (Section 5.1): recompute every ``period`` labels.

    Parameters
    ----------
    period
        Labeled samples between two recomputes, ≥ 1.

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.window import CountWindow
    >>> window, x = CountWindow(10, n_features=2), np.zeros(2)
    >>> monitor = PeriodicMonitor(period=3)
    >>> flags = []
    >>> for _ in range(4):
    ...     monitor.update(x, 1.0, error=0.0, window=window, n_evicted=window.push(x, 1.0))
    ...     flags.append(monitor.drift_detected)
    >>> flags
    [False, False, True, True]

    The loop calls :meth:`reset` after the recompute, which starts the count over.
    """

    name = "periodic"

    def __init__(self, period: int) -> None:
        super().__init__()
        if period < 1:
            raise ValueError("period must be >= 1")
        self.period = period
        self._since = 0

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        self._since = 0
        self.drift_detected = False

    def update(self, x: FloatArray, y: float, error: float, window: Evictions, n_evicted: int) -> None:
        self._since += 1
        self.drift_detected = self._since >= self.period
        if self.drift_detected:
            self.n_detections += 1

    @property
    def stats(self) -> dict[str, Any]:
        return {**super().stats, "since_recompute": self._since, "period": self.period}
