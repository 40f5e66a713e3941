"""A third party's strategy: its own monitor, registered by name under ``edgedrift.strategies``.

``example-every-k`` predicts with the batch model and asks the cloud for a recompute after every ``k``
labels, counted by :class:`EveryK` (a monitor written outside EdgeDrift). ``example-bad`` names
something that is not a strategy, so the catalogue's error report can be tested.
"""

from __future__ import annotations

from edgedrift.loop import EdgeLoop
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray
from edgedrift.monitors.base import Evictions, Monitor
from edgedrift.strategies import Context, Strategy
from edgedrift.window import CountWindow


class EveryK(Monitor):
    """Drift after every ``k`` labels since the last recompute."""

    name = "every-k"

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.seen = 0

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        self.seen = 0
        self.drift_detected = False

    def update(self, x: FloatArray, y: float, error: float, window: Evictions, n_evicted: int) -> None:
        self.seen += 1
        self.drift_detected = self.seen >= self.k
        self.n_detections += int(self.drift_detected)


def _build(ctx: Context, k: float | None) -> EdgeLoop:
    monitor = EveryK(int(k if k is not None else 150))
    return EdgeLoop(CountWindow(ctx.window_labels, ctx.n_features), monitor, ctx.recompute, guard=ctx.guard)


every_k = Strategy(
    "example-every-k",
    "A third-party monitor: recompute after every k labels",
    _build,
    "k",
    (50, 150, 500),
    150,
)

not_a_strategy = 42
