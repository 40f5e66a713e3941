"""The monitor interface shared by every recompute trigger (river's drift-detector style).

A monitor watches the labeled stream under the current batch model β₁ and raises ``drift_detected`` when
a batch recompute is due; ``warning_detected`` means "suspected": the loop may then predict with the
incremental model. After a recompute the loop calls :meth:`Monitor.reset` with the new model and the
window it was trained on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray
from edgedrift.window import CountWindow, TimeWindow


class Monitor(ABC):
    """Decides when the batch model is stale."""

    #: Short name used in results and events.
    name: str = "monitor"
    #: True if the paper's Algorithm 1 policy applies: predict with β_cur while a warning is on.
    incremental_during_warning: bool = False

    def __init__(self) -> None:
        self.drift_detected = False
        self.warning_detected = False
        self.n_detections = 0

    @abstractmethod
    def reset(self, model: LinearModel, X: FloatArray, y: FloatArray) -> None:
        """A new batch model ``model`` trained on (X, y) was installed: start monitoring it."""

    @abstractmethod
    def update(
        self, x: FloatArray, y: float, error: float, window: CountWindow | TimeWindow, n_evicted: int
    ) -> None:
        """A labeled sample (already pushed into ``window``, which evicted ``n_evicted`` samples).

        ``error`` is the current predictor's loss on the sample before learning it (0/1 for
        classification, squared error for regression).
        """

    def update_unlabeled(self, x: FloatArray) -> None:  # noqa: B027 - optional hook, a no-op by default
        """An unlabeled sample; only prediction-bound monitors (PredSign) use it."""

    def train_on_last(self) -> int | None:
        """How many of the newest window samples the recompute should use (None: the whole window)."""
        return None

    @property
    def stats(self) -> dict[str, Any]:
        """Readable state for events, heartbeats and plots."""
        return {"detections": self.n_detections, "warning": self.warning_detected}


class NeverMonitor(Monitor):
    """Never asks for a recompute (incremental learning only, after the initial batch model)."""

    name = "never"

    def reset(self, model: LinearModel, X: FloatArray, y: FloatArray) -> None:
        self.drift_detected = False

    def update(
        self, x: FloatArray, y: float, error: float, window: CountWindow | TimeWindow, n_evicted: int
    ) -> None:
        return None


class PeriodicMonitor(Monitor):
    """The paper's periodic sliding window: recompute every ``period`` labeled samples."""

    name = "periodic"

    def __init__(self, period: int) -> None:
        super().__init__()
        if period < 1:
            raise ValueError("period must be >= 1")
        self.period = period
        self._since = 0

    def reset(self, model: LinearModel, X: FloatArray, y: FloatArray) -> None:
        self._since = 0
        self.drift_detected = False

    def update(
        self, x: FloatArray, y: float, error: float, window: CountWindow | TimeWindow, n_evicted: int
    ) -> None:
        self._since += 1
        self.drift_detected = self._since >= self.period
        if self.drift_detected:
            self.n_detections += 1

    @property
    def stats(self) -> dict[str, Any]:
        return {**super().stats, "since_recompute": self._since, "period": self.period}
