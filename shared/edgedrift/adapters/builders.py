"""Strategies from a user's own learner or monitor: what a package registers under ``edgedrift.strategies``.

A strategy is the one :class:`~edgedrift.loop.EdgeLoop` around a monitor, an incremental learner and a
prediction policy (:mod:`edgedrift.strategies`). These two helpers build the common shapes, so a
third-party learner or monitor becomes a named strategy in one call:

* :func:`learner_strategy`: the learner predicts; a monitor (DRUiD's bound by default, parameter α)
  decides when the cloud recomputes the batch model, and every recompute re-anchors the learner;
* :func:`monitor_strategy`: the batch model predicts; the monitor decides when it is recomputed on the
  window.

Examples
--------
>>> from edgedrift.learners import SGD
>>> from edgedrift.monitors import PeriodicMonitor
>>> every_50 = monitor_strategy("every-50", "recompute every 50 labels", lambda ctx: PeriodicMonitor(50))
>>> every_50.name, every_50.param
('every-50', None)
>>> sgd = learner_strategy("my-sgd", "SGD re-anchored by DRUiD", lambda ctx: SGD(ctx.n_features))
>>> sgd.param, sgd.default
('alpha', 0.999)
"""

from __future__ import annotations

from collections.abc import Callable

from edgedrift.learners.base import OnlineLearner
from edgedrift.loop import EdgeLoop
from edgedrift.monitors import DruidMonitor, Monitor
from edgedrift.strategies.catalogue import DRUID_GRID, Strategy
from edgedrift.strategies.context import Context
from edgedrift.window import CountWindow

__all__ = ["LearnerFactory", "MonitorFactory", "druid_monitor", "learner_strategy", "monitor_strategy"]

#: Builds the learner for a stream (its shape, task and first window are in the context).
LearnerFactory = Callable[[Context], OnlineLearner]
#: Builds the monitor for a stream and a value of the strategy's parameter (None without one).
MonitorFactory = Callable[[Context, float | None], Monitor]


def druid_monitor(ctx: Context, alpha: float | None) -> Monitor:
    """EdgeDrift's whitened DRUiD bound at level α over the context's window."""
    return DruidMonitor(alpha=0.999 if alpha is None else float(alpha), t_n=ctx.window_labels)


def _loop(ctx: Context, monitor: Monitor, learner: OnlineLearner | None) -> EdgeLoop:
    return EdgeLoop(
        CountWindow(ctx.window_labels, ctx.n_features),
        monitor,
        ctx.recompute,
        learner,
        "batch" if learner is None else "incremental",
        guard=ctx.guard,
    )


def learner_strategy(
    name: str,
    description: str,
    learner: LearnerFactory,
    monitor: MonitorFactory = druid_monitor,
    param: str | None = "alpha",
    grid: tuple[float, ...] = DRUID_GRID,
    default: float | None = 0.999,
    classification_only: bool = False,
) -> Strategy:
    """The learner predicts; ``monitor`` (DRUiD at α by default) calls recomputes that re-anchor it."""
    return Strategy(
        name,
        description,
        lambda ctx, value: _loop(ctx, monitor(ctx, value), learner(ctx)),
        param,
        grid if param is not None else (),
        default if param is not None else None,
        classification_only=classification_only,
    )


def monitor_strategy(
    name: str,
    description: str,
    monitor: Callable[[Context], Monitor],
    classification_only: bool = False,
) -> Strategy:
    """The batch model predicts; ``monitor`` decides when it is recomputed on the window."""
    return Strategy(
        name,
        description,
        lambda ctx, _: _loop(ctx, monitor(ctx), None),
        classification_only=classification_only,
    )
