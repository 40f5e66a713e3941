"""river learners and detectors as named strategies (the ``river`` extra).

:func:`river_learner_strategy` makes any river classifier or regressor the edge learner (re-anchored by
every recompute, see :mod:`edgedrift.adapters.river_learner`), :func:`river_detector_strategy` any
``river.drift`` detector instance the recompute trigger. edgedrift-core registers four of them under the
entry-point group ``edgedrift.strategies``, so the agent and the evaluator know them by name:

* ``river-logreg``: ``StandardScaler | LogisticRegression`` predicts, DRUiD (α) re-anchors it (warm start);
* ``river-hoeffding``: ``HoeffdingTreeClassifier`` predicts, DRUiD (α) resets it and replays the window;
* ``river-page-hinkley``: the batch model predicts, ``PageHinkley(mode="up")`` on its error recomputes
  on the newest 30 labels (its ``min_instances``; see :mod:`edgedrift.adapters.river_monitor` for why
  not the whole window), then on the whole window once it has refilled;
* ``river-kswin``: the same with ``KSWIN(alpha=1e-4, seed=0)`` (seeded, so a replay makes the same
  recomputes; river's α = 0.005 raises false alarms on a 0/1 error stream) and its ``stat_size`` of 30.

This module imports river at the top: without the extra, loading these entries fails and the catalogue
(:mod:`edgedrift.adapters.entry_points`) says so when one is asked for.

Examples
--------
ADWIN as the trigger, on Sine1 (the concept flips every 10,000 samples; every 10th labeled): with the
defaults a drift retrains on the newest 30 labels, then on the whole window once it has refilled. Trained
on the whole window at once (``last=None``), the model is mostly of the concept that just ended, and the
strategy scores far below the no-change baseline (the last label seen):

>>> import numpy as np
>>> from river import drift
>>> from edgedrift.data import load_dataset
>>> from edgedrift.metrics.baselines import no_change_predictions
>>> from edgedrift.strategies import Context
>>> from edgedrift.training.linear import LinearTrainer
>>> s = river_detector_strategy("adwin-001", "ADWIN at delta 0.01", drift.ADWIN(delta=0.01))
>>> s.name, s.classification_only
('adwin-001', False)
>>> stream = load_dataset("sine1+", seed=0)
>>> X, y, labeled = stream.X, stream.y, np.arange(len(stream.y)) % 10 == 0
>>> X0, y0 = X[:2000][labeled[:2000]], y[:2000][labeled[:2000]]
>>> def accuracy(strategy):
...     ctx = Context(2, "classification", "logistic", 200, 1.0, LinearTrainer("logistic", 1.0), X0, y0)
...     loop = strategy.build(ctx)
...     loop.start(ctx.initial_model(), X0, y0)
...     hits = [loop.process_one(X[i], y[i] if labeled[i] else None) == y[i] for i in range(2000, len(y))]
...     return round(float(np.mean(hits)), 3), loop.counters.recomputes
>>> accuracy(s)
(0.906, 18)
>>> accuracy(river_detector_strategy("adwin-window", "", drift.ADWIN(delta=0.01), last=None))
(0.147, 9)
>>> round(float(np.mean(no_change_predictions(y, labeled)[2000:] == y[2000:])), 3)
0.504
"""

from __future__ import annotations

from typing import Any

from river import drift, linear_model, preprocessing, tree

from edgedrift.adapters.builders import MonitorFactory, druid_monitor, learner_strategy, monitor_strategy
from edgedrift.adapters.river_learner import RiverLearner
from edgedrift.adapters.river_monitor import DEFAULT_LAST, RiverDriftMonitor
from edgedrift.strategies.catalogue import Strategy

__all__ = [
    "river_detector_strategy",
    "river_hoeffding",
    "river_kswin",
    "river_learner_strategy",
    "river_logreg",
    "river_page_hinkley",
]


def river_learner_strategy(
    name: str,
    description: str,
    model: Any,
    monitor: MonitorFactory = druid_monitor,
    classification_only: bool = False,
) -> Strategy:
    """``model`` (an untrained river estimator, cloned per stream) predicts; ``monitor`` re-anchors it."""
    return learner_strategy(
        name,
        description,
        lambda ctx: RiverLearner(model, ctx.n_features, ctx.task, ctx.window_labels),
        monitor,
        classification_only=classification_only,
    )


def river_detector_strategy(
    name: str, description: str, detector: Any, last: int | None = DEFAULT_LAST, refill: bool = True
) -> Strategy:
    """The batch model predicts; a fresh clone of ``detector`` watches its error and calls recomputes on
    the newest ``last`` labels of the window (None: the whole window) and, with ``refill``, on the whole
    window once it holds only samples since (:class:`~edgedrift.adapters.river_monitor.RiverDriftMonitor`)."""
    return monitor_strategy(name, description, lambda ctx: RiverDriftMonitor(detector, last, refill))


river_logreg = river_learner_strategy(
    "river-logreg",
    "river StandardScaler | LogisticRegression as the edge learner, warm-started by DRUiD's recomputes",
    preprocessing.StandardScaler() | linear_model.LogisticRegression(),
    classification_only=True,
)
river_hoeffding = river_learner_strategy(
    "river-hoeffding",
    "river HoeffdingTreeClassifier as the edge learner, reset and replayed on DRUiD's recomputes",
    tree.HoeffdingTreeClassifier(),
    classification_only=True,
)
river_page_hinkley = river_detector_strategy(
    "river-page-hinkley",
    "river PageHinkley (mode up) on the batch model's error; a drift recomputes on the newest 30 labels",
    drift.PageHinkley(mode="up"),
    last=30,
)
river_kswin = river_detector_strategy(
    "river-kswin",
    "river KSWIN (alpha 1e-4, seed 0) on the batch model's error; a drift recomputes on the newest 30 labels",
    drift.KSWIN(alpha=1e-4, seed=0),
    last=30,
)
